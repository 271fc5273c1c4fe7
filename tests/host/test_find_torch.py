"""The agent runs without its site (`python -S`); the probe still finds the job's torch where the
job's interpreter will: in a venv's site-packages, through a .pth's path line, or, failing
those, after site itself has run (an editable install's finder)."""

from __future__ import annotations

import json
import subprocess
import venv
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
ASK = (
    "import json,sys;sys.path.insert(0,sys.argv[1]);from host import probe;"
    "f=probe.find_torch();print(json.dumps([f and f.origin, sys.flags.no_site]))"
)


def fake_torch(where: Path, version: str) -> Path:
    (where / "torch").mkdir(parents=True)
    (where / "torch" / "__init__.py").write_text("")
    (where / "torch" / "version.py").write_text(f"__version__ = {version!r}\ncuda = None\n")
    return where / "torch" / "__init__.py"


def found(python: Path) -> str | None:
    out = subprocess.run(
        [str(python), "-S", "-c", ASK, str(REPO / "remote")],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    origin, no_site = json.loads(out)
    assert no_site
    return str(origin) if origin else None


def make_venv(tmp: Path) -> tuple[Path, Path]:
    venv.EnvBuilder(with_pip=False, symlinks=True).create(tmp / "v")
    site = next((tmp / "v" / "lib").glob("python3*/site-packages"))
    return tmp / "v" / "bin" / "python", site


def test_a_venvs_torch_is_found_without_site(tmp_path: Path) -> None:
    python, site = make_venv(tmp_path)
    init = fake_torch(site, "2.13.0")
    assert found(python) == str(init)


def test_a_torch_a_pth_path_names_is_found(tmp_path: Path) -> None:
    python, site = make_venv(tmp_path)
    init = fake_torch(tmp_path / "src", "2.14.0a0")  # `python setup.py develop` of torch
    (site / "easy-install.pth").write_text(f"# a comment\nimport os\n{tmp_path / 'src'}\n")
    assert found(python) == str(init)


def test_a_torch_only_site_finds_is_found_after_site(tmp_path: Path) -> None:
    python, site = make_venv(tmp_path)
    init = fake_torch(tmp_path / "hooked", "2.14.0a0")
    (site / "hook.pth").write_text(f"import sys; sys.path.append({str(tmp_path / 'hooked')!r})\n")
    assert found(python) == str(init)


def test_no_torch_is_none(tmp_path: Path) -> None:
    python, _ = make_venv(tmp_path)
    assert found(python) is None
