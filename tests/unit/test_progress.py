"""Progress, metrics and links read from real output forms, and lines that only look like them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from ddptui.remote.events import progress_text
from ddptui.remote.host.progress import SERIES_MAX, Parser, Series, Tracker
from ddptui.remote.run.progress import ProgressReader

DATA = Path(__file__).parent.parent / "data" / "progress"


def parse(line: str, pattern: str | None = None) -> Any:
    return Parser(pattern).parse(line)  # type: ignore[no-untyped-call]


def recorded(name: str) -> list[str]:
    """A recording's lines as the relay sends them: split at newlines, \\r redraws kept."""
    return (DATA / name).read_bytes().decode("utf-8").split("\n")


def test_tqdm_redrawn_with_carriage_returns_gives_the_last_drawing() -> None:
    # tqdm 4.70 into a file: one line of \r-redrawn bars (tests/data/progress/tqdm.txt)
    line = recorded("tqdm.txt")[0]
    assert line.count("\r") == 52
    step, total, rate, metrics, link = parse(line)
    assert (step, total, metrics, link) == (50, 50, {}, None)
    assert rate == pytest.approx(456.03)


def test_tqdm_forms() -> None:
    assert parse(" 45%|████▌     | 450/1000 [01:02<01:18,  7.20it/s]")[:3] == (450, 1000, 7.2)
    assert parse("450it [01:02, 7.20it/s]")[:3] == (450, None, 7.2)
    assert parse("  3%|▎         | 3/100 [00:05<02:41,  1.67s/it]")[2] == pytest.approx(1 / 1.67)
    assert parse("  0%|          | 0/1000 [00:00<?, ?it/s]")[:3] == (0, 1000, None)


def test_lightning_tqdm_bar_counts_steps_across_epochs_and_skips_validation() -> None:
    # Lightning 2.6's TQDMProgressBar, 3 epochs of 20 batches, validation between
    seen = [p for p in map(parse, recorded("lightning_tqdm.txt")) if p is not None]
    steps = [p[0] for p in seen]
    assert steps == sorted(steps) and steps[-1] == 60  # validation's 0/4 .. 4/4 never count
    assert seen[-1][3] == {"loss": 2.68}  # the bar's postfix
    assert all(p[1] is None for p in seen)  # the epochs to come are not said


def test_lightning_rich_bar_and_its_tip_link_is_no_tracker() -> None:
    lines = recorded("lightning_rich.txt")
    found = [p for p in map(parse, lines) if p is not None]
    assert found == [(40, 40, 438.86, {"loss": 422.743}, None)]
    assert any("https://pypi.org" in line for line in lines)  # 💡 Tip: ... litlogger link


def test_hugging_face_trainer_log_dicts() -> None:
    got = parse("{'loss': 0.4123, 'grad_norm': 3.2113, 'learning_rate': 2e-05, 'epoch': 0.5}")
    assert got == (None, None, None, {"loss": 0.4123, "grad_norm": 3.2113,
                                      "learning_rate": 2e-05, "epoch": 0.5}, None)  # fmt: skip
    wrapped = parse("{'loss': np.float64(0.41), 'epoch': 1.0}")
    assert wrapped[3] == {"loss": 0.41, "epoch": 1.0}
    final = parse(
        "{'train_runtime': 3600.5, 'train_samples_per_second': 27.8, 'train_loss': 0.51, "
        "'epoch': 3.0}"
    )
    assert final[3]["train_loss"] == 0.51


@pytest.mark.parametrize(
    ("line", "want"),
    [
        ("step 1200/5000 loss 0.41", (1200, 5000, {"loss": 0.41})),
        ("step 1200/5000 loss=0.41 lr=3e-4", (1200, 5000, {"loss": 0.41, "lr": 3e-4})),
        ("Epoch 2 | Step 300 | loss: 0.52, acc: 0.91", (300, None, {"loss": 0.52, "acc": 0.91})),
        ("iter 40: loss 2.1, time 81.3ms", (40, None, {"loss": 2.1})),  # nanoGPT
        ("[step 7/10] train_loss=1.5e+00 took 3s", (7, 10, {"train_loss": 1.5})),
    ],
)
def test_step_and_pairs(line: str, want: tuple[Any, ...]) -> None:
    step, total, _, metrics, _ = parse(line)
    assert (step, total, metrics) == want


@pytest.mark.parametrize(
    ("line", "want"),
    [
        (
            "wandb: 🚀 View run at https://wandb.ai/team/proj/runs/abc123",
            ("W&B", None, "https://wandb.ai/team/proj/runs/abc123"),
        ),
        (
            "\x1b[34m\x1b[1mwandb\x1b[0m: 🚀 View run \x1b[33mfancy-sun-1\x1b[0m at: "
            "\x1b[34m\x1b[4mhttps://wandb.ai/team/proj/runs/abc123\x1b[0m",
            ("W&B", "fancy-sun-1", "https://wandb.ai/team/proj/runs/abc123"),
        ),
        (
            "TensorBoard 2.16.2 at http://localhost:6006/ (Press CTRL+C to quit)",
            ("TensorBoard", "2.16.2", "http://localhost:6006/"),
        ),
        (
            "🏃 View run bold-cat-42 at: http://127.0.0.1:5000/#/experiments/0/runs/7c1e9f",
            ("MLflow", "bold-cat-42", "http://127.0.0.1:5000/#/experiments/0/runs/7c1e9f"),
        ),
        (
            "COMET INFO: Experiment is live on comet.com https://www.comet.com/team/proj/1f2e3d",
            ("Comet", None, "https://www.comet.com/team/proj/1f2e3d"),
        ),
        (
            "COMET INFO:     url                   : https://www.comet.com/team/proj/1f2e3d",
            ("Comet", None, "https://www.comet.com/team/proj/1f2e3d"),
        ),
        ("Open http://127.0.0.1:43800", ("Aim", None, "http://127.0.0.1:43800")),
    ],
)
def test_tracker_links(line: str, want: tuple[str, str | None, str]) -> None:
    assert parse(line) == (None, None, None, {}, want)


@pytest.mark.parametrize(
    "line",
    [
        "requests.exceptions.HTTPError: 404 Client Error: Not Found for url: https://api.wandb.ai/graphql",
        '    print(f"View run at https://wandb.ai/{entity}")',
        '  File "/opt/venv/lib/python3.11/site-packages/wandb/sdk/wandb_run.py", line 12, in init',
        "wandb: ⭐️ View project at https://wandb.ai/team/proj",
        "🧪 View experiment at: http://127.0.0.1:5000/#/experiments/0",
        "UserWarning: 45% of the samples were dropped | see [the docs, 3 it/s]",
        "Downloading: 45%|████▌ | 45.0M/100M [00:01<00:01, 45.0MB/s]",
        "Map: 100%|██████████| 1000/1000 [00:00<00:00, 12000.00 examples/s]",
        "Validation DataLoader 0:  50%|█████     | 5/10 [00:00<00:00, 50.0it/s]",
        "warning: step 3 of the setup failed",
        "NCCL INFO Channel 00/02 : 0[0] -> 1[0] via P2P/IPC",
        "{'a': 'b'}",
    ],
)
def test_look_alikes_are_not_progress(line: str) -> None:
    assert parse(line) is None


def test_job_progress_regex_comes_first() -> None:
    pattern = r"it (?P<step>\d+) of (?P<total>\d+): nll=(?P<nll>\S+)"
    assert parse("it 5 of 9: nll=0.3", pattern) == (5, 9, None, {"nll": 0.3}, None)
    assert parse("step 3/4 loss 1", pattern)[:2] == (3, 4)  # the forms still hold


def test_series_stays_bounded_and_spread_over_the_whole_run() -> None:
    series = Series()  # type: ignore[no-untyped-call]
    for i in range(100_000):
        series.add(i, float(i), 0)  # type: ignore[no-untyped-call]
    steps = [p[0] for p in series.points]
    assert SERIES_MAX // 2 <= len(steps) <= SERIES_MAX
    assert steps[0] == 0 and steps[-1] == 99_999 and steps == sorted(steps)


def test_tracker_series_spans_attempts_and_follows_the_lowest_rank() -> None:
    t = Tracker()  # type: ignore[no-untyped-call]
    t.feed_text("[1]:step 1/4 loss 9\n[0]:step 1/4 loss 2.0\n[0]:step 2/4 loss 1.5\n", 0, 10.0)
    t.feed_text("[0]:wandb: 🚀 View run at https://wandb.ai/t/p/runs/x\n", 0, 10.5)
    t.feed_text("[0]:step 2/4 loss 1.4\n[0]:step 3/4 loss 1.0\n", 1, 20.0)
    t.feed_text("[1]:step 2/4 loss 8\n", 0, 20.0)  # another node's, late: no attempt again
    dump = t.dump()
    assert dump["metrics"]["loss"] == [[1, 2.0, 0], [2, 1.5, 0], [2, 1.4, 1], [3, 1.0, 1]]
    assert [a["attempt"] for a in dump["attempts"]] == [0, 1]
    assert dump["attempts"][1]["step"] == 2
    assert dump["last"]["step"] == 3 and dump["last"]["metrics"] == {"loss": 1.0}
    assert dump["links"] == [
        {"tracker": "W&B", "name": None, "url": "https://wandb.ai/t/p/runs/x", "rank": 0}
    ]


def test_watch_emits_progress_once_per_news_and_each_link_once() -> None:
    got: list[Any] = []
    watch = ProgressReader(None, got.append)
    line = "[0]:TensorBoard 2.16.2 at http://localhost:6006/ (Press CTRL+C to quit)\n"
    watch.feed(line + line, 0)
    watch.feed("[0]:step 10/100 loss 0.5\n", 0, 1.0)
    watch.feed("[0]:step 20/100 loss 0.4\n", 0, 3.0)
    watch.tell()
    watch.tell()  # no news: nothing
    assert [type(e).__name__ for e in got] == ["TrackerLink", "Progress"]
    progress = got[1]
    assert (progress.step, progress.total, progress.rate) == (20, 100, 5.0)
    assert progress.left == 16.0
    assert progress.text() == "step 20/100 · 5 it/s · loss 0.4 · 16 s left"


def test_progress_text() -> None:
    text = progress_text(1200, 5000, 7.2, {"lr": 1e-4, "loss": 0.41}, 540)
    assert text == "step 1200/5000 · 7.2 it/s · loss 0.41 · lr 0.0001 · 9 min left"


def test_the_run_dir_keeps_the_curve_and_plot_draws_it(tmp_path: Path) -> None:
    import asyncio
    import io
    import json

    from ddptui.remote.events import RunFinished, RunStarted
    from ddptui.remote.store.record import Recorder
    from ddptui.tui.headless.plot import plot

    watch = ProgressReader(None, lambda event: None)
    for attempt, steps in ((0, range(0, 50)), (1, range(40, 100))):
        lines = "".join(f"[0]:step {s}/100 loss {2 - s / 100:.3f} acc {s / 100}\n" for s in steps)
        watch.feed(lines, attempt, 1.0)
    run_dir = tmp_path / "r1"
    recorder = Recorder(run_dir)
    (run_dir / "run.json").write_text(json.dumps({"run_id": "r1", "hosts": ["node0"]}))
    recorder(RunStarted("r1", str(run_dir), ("node0",), 1, "torchrun"))
    recorder.series = watch.dump()
    recorder(RunFinished("succeeded", 0, 1.0))
    recorder.close()
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["progress"]["step"] == 99 and summary["progress"]["metrics"]["loss"] == 1.01
    series = json.loads((run_dir / "series.json").read_text())
    assert [a["step"] for a in series["attempts"]] == [0, 40]
    out = io.StringIO()
    assert asyncio.run(plot(str(run_dir), None, out)) == 0
    drawn = out.getvalue()
    assert "loss" in drawn and "attempt 2" in drawn and "│" in drawn
    assert drawn.endswith("last: step 99/100 · loss 1.01 · acc 0.99\n")
    assert asyncio.run(plot(str(run_dir), "nope", io.StringIO())) == 2


def test_a_loop_that_says_only_its_epochs() -> None:
    assert parse("epoch 3: loss 0.4100")[:4] == (3, None, None, {"loss": 0.41})  # examples/train.py
    assert parse("Epoch 2 | Step 300 | loss: 0.52")[0] == 300  # a step, where said, first
    assert parse("epoch 3 done") is None


def test_a_flood_is_read_in_full_up_to_a_budget_then_its_news_once_a_second(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from ddptui.remote.host import progress

    # one second of reading throughout: on a loaded machine the first chunk alone took longer
    monkeypatch.setattr(progress.time, "monotonic", lambda: 1000.0)
    t = Tracker()  # type: ignore[no-untyped-call]
    chunk = "".join(f"[0]:step {i}/10 loss 1\n" for i in range(progress.READ_LINES))
    t.feed_text(chunk, 0, 1.0)
    assert len(t.series["loss"].points) > 1  # every line read
    count = t.series["loss"].count
    t.feed_text("[0]:step 7/9 loss 0.5\n[1]:wandb: View run at https://wandb.ai/x\n", 0, 2.0)
    t.feed_text("[2]:step 8/9 loss 0.25\n", 0, 2.0, 1, 1)  # another node's
    t.feed_text("[0]:step 9/9 loss 0.125\n", 0, 2.0)  # past the budget: kept, not read
    assert t.series["loss"].count == count and not t.links
    t.flush()  # type: ignore[no-untyped-call]
    assert t.last()["step"] == 9  # type: ignore[no-untyped-call]
    assert t.series["loss"].points[-1][:2] == [9, 0.125]  # rank 0's: rank 2's is not drawn
    assert t.ranks[2].step == 8  # each source's last line
    assert not t.links  # only the last chunk of each source is read for links


def test_a_trainer_dict_written_over_its_bar() -> None:
    # transformers' Trainer logs through tqdm.write: the bar cleared, the dict, the bar again
    line = (
        "\r 10%|█         | 50/500 [00:07<01:03,  7.09it/s]\r 10%|█         | 51/500 [00:07<01:03,"
        "  7.11it/s]\r                                                  \r"
        "{'loss': 0.4123, 'grad_norm': 3.2, 'learning_rate': 2e-05, 'epoch': 0.1}"
    )
    assert parse(line) == (
        51,
        500,
        7.11,
        {"loss": 0.4123, "grad_norm": 3.2, "learning_rate": 2e-05, "epoch": 0.1},
        None,
    )


def test_an_attach_goes_on_from_node_0s_curve_and_refuses_garbage() -> None:
    t = Tracker()  # type: ignore[no-untyped-call]
    t.feed_text("[0]:step 1/9 loss 2\n[0]:step 5/9 loss 1\n", 0, 1.0)
    t.feed_text("[0]:wandb: View run at https://wandb.ai/x\n", 0, 1.0)
    seeded = Tracker()  # type: ignore[no-untyped-call]
    assert seeded.seed(json_round_trip(t.dump()))  # type: ignore[no-untyped-call]
    seeded.feed_text("[0]:step 6/9 loss 0.5\n", 0, 2.0)
    assert seeded.dump()["metrics"]["loss"] == [[1, 2, 0], [5, 1, 0], [6, 0.5, 0]]  # type: ignore[no-untyped-call]
    assert seeded.last()["step"] == 6 and seeded.link_list()[0]["url"] == "https://wandb.ai/x"  # type: ignore[no-untyped-call]
    for bad in ({"metrics": {"loss": [["x", 1, 0]]}}, {"metrics": []}, {"metrics": {}}, {}):
        assert not Tracker().seed(bad)  # type: ignore[no-untyped-call]


def json_round_trip(data: Any) -> Any:
    import json

    return json.loads(json.dumps(data))


def test_a_long_line_is_read_by_its_head_and_tail_only() -> None:
    from ddptui.remote.host.progress import LOOK

    noise = "x" * (3 * LOOK)
    assert parse("step 3/9 loss 0.5 " + noise)[:4] == (3, 9, None, {"loss": 0.5})  # its head
    bar = "".join(f"\r{i}/500 [00:01<00:02, 4.00it/s]" for i in range(2000))  # redrawn: its tail
    assert len(bar) > 2 * LOOK and parse(bar)[:3] == (1999, 500, 4.0)
    assert parse("x" * LOOK + " step 3/9 loss 0.5 " + "x" * LOOK) is None  # its middle: unread


@pytest.mark.security
def test_links_are_bounded_kept_once_and_never_carry_a_control() -> None:
    from ddptui.remote.host.progress import LINKS_MAX, URL_MAX

    t = Tracker()  # type: ignore[no-untyped-call]
    t.feed_text("".join(f"[0]:wandb: View run at https://w.ai/r/{i}\n" for i in range(3000)), 0)
    t.feed_text("[0]:wandb: View run at https://w.ai/r/0\n", 0)
    assert list(t.links) == [f"https://w.ai/r/{i}" for i in range(LINKS_MAX)]
    assert parse("wandb: View run at https://w.ai/" + "a" * URL_MAX) is None
    osc = parse("wandb: View run x\x1b]52;c;aGk=\x07 at https://w.ai/r/\x1b]52;c;aGk=\x07")
    assert osc is None or "\x1b" not in str(osc)
    seeded = Tracker()  # type: ignore[no-untyped-call]
    links = [{"tracker": "W&B", "url": f"https://w.ai/{i}", "name": None, "rank": 0}
             for i in range(3000)]  # fmt: skip
    assert seeded.seed({"metrics": {"loss": [[1, 1.0, 0]]}, "links": links})  # type: ignore[no-untyped-call]
    assert len(seeded.links) == LINKS_MAX


@pytest.mark.security
def test_a_run_keeps_the_curves_of_a_bounded_number_of_metrics_of_plain_names() -> None:
    from ddptui.remote.host.progress import METRICS_MAX

    t = Tracker()  # type: ignore[no-untyped-call]
    t.feed_text("".join(f"[0]:step {i} m{i}=1 loss=2\n" for i in range(1000)), 0)
    assert len(t.series) == METRICS_MAX and "loss" in t.series
    assert all(len(s.metrics) <= METRICS_MAX for s in t.ranks.values())
    seeded = Tracker()  # type: ignore[no-untyped-call]
    hostile = {"metrics": {"loss\x1b]52;c;aGk=\x07": [[1, 1.0, 0]], "ok": [[1, 1.0, 0]]},
               "last": {"metrics": {"loss\x1b]52;c;aGk=\x07": 1.0, "ok": 1.0}}}  # fmt: skip
    assert seeded.seed(hostile)  # type: ignore[no-untyped-call]
    assert list(seeded.series) == ["ok"] and seeded.last()["metrics"] == {"ok": 1.0}  # type: ignore[no-untyped-call]
