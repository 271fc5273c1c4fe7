"""MkDocs hooks (mkdocs.yml): the README is the site's front page, its links made the site's
own, and a page's links to the README go to that page: one text serves GitHub and the site."""

from __future__ import annotations

import re
from pathlib import Path

from mkdocs.config.defaults import MkDocsConfig
from mkdocs.structure.files import File, Files
from mkdocs.structure.pages import Page

README = Path(__file__).resolve().parents[1] / "README.md"
LINK = re.compile(r"\[([^\]]+)\]\(([^)\s]+)\)")


def front_page(text: str) -> str:
    """README.md as docs/index.md: `docs/x.md` is `x.md` there, SECURITY.md its page, a link
    to another file of the repository (`inventory.yaml`) its text alone."""
    return LINK.sub(_site_link, text)


def _site_link(link: re.Match[str]) -> str:
    text, target = link.groups()
    if target.startswith("docs/"):
        return f"[{text}]({target.removeprefix('docs/')})"
    if target.startswith("SECURITY.md"):
        return f"[{text}]({target.replace('SECURITY.md', 'security.md', 1)})"
    if re.match(r"[a-z]+:|#", target):
        return link.group(0)  # a web address, or a heading of the page itself
    return text


def on_files(files: Files, config: MkDocsConfig) -> Files:
    files.append(File.generated(config, "index.md", content=front_page(README.read_text())))
    return files


def on_page_markdown(markdown: str, page: Page, config: MkDocsConfig, files: Files) -> str:
    return markdown.replace("](../README.md", "](index.md")
