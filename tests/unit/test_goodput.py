"""The goodput account (core/goodput.py) from attempts recorded by hand: the categories sum
to each attempt's wall time, the work a restart did again moves from productive to wasted,
and the file an attempt keeps survives damage and earlier attempts."""

import json
import subprocess
import sys
import time

import pytest

from core import goodput
from core.errors import UserError
from tests.support.paths import ROOT
from tests.support.runs import saved_config


def attempt(started, wall, resumed_from, reached, productive, at_step, **seconds):
    return {"id": f"a{started}", "started": started, "last": started + wall,
            "resumed_from": resumed_from, "reached": reached,
            "productive_at_step": {str(k): v for k, v in at_step.items()},
            "seconds": {**dict.fromkeys(goodput.MEASURED, 0.0), "productive": productive,
                        **seconds}}


# killed at step 7 after a checkpoint at 4; resumed from 4 an hour later, to step 10
KILLED = attempt(1000.0, 100.0, 0, 7, productive=70.0, at_step={0: 0.0, 4: 40.0},
                 training_prep=10.0, program_startup=12.0, data_loading=3.0,
                 unproductive_checkpoint_save_time=2.0)
RESUMED = attempt(4700.0, 80.0, 4, 10, productive=60.0, at_step={4: 0.0, 10: 60.0},
                  training_prep=8.0, unproductive_checkpoint_restore_time=2.0,
                  program_startup=6.0, evaluation=1.0)


def test_a_restart_moves_the_steps_done_again_to_wasted_and_the_categories_sum_to_wall():
    summary = goodput.account([KILLED, RESUMED])
    first, second = summary["attempts"]
    assert first["lost_steps"] == 3 and summary["lost_steps"] == 3
    # steps 5-7 took 70 - 40 s of the first attempt's productive time
    assert first["seconds"]["wasted_progress_from_disruption"] == pytest.approx(30.0)
    assert first["seconds"]["productive"] == pytest.approx(40.0)
    assert first["seconds"]["other"] == pytest.approx(100.0 - 40 - 30 - 10 - 12 - 3 - 2)
    for row in (first, second):
        assert sum(row["seconds"].values()) == pytest.approx(row["wall_s"])
    assert summary["wall_s"] == pytest.approx(180.0)
    assert sum(summary["seconds"].values()) == pytest.approx(180.0)
    assert summary["goodput"] == pytest.approx((40.0 + 60.0) / 180.0)
    assert summary["between_attempts_s"] == pytest.approx(4700.0 - 1100.0)
    assert set(summary["seconds"]) == set(goodput.CATEGORIES)


def test_a_restart_from_where_the_attempt_began_wastes_all_its_steps():
    lost = attempt(0.0, 50.0, 4, 6, productive=20.0, at_step={4: 0.0})
    again = attempt(60.0, 50.0, 4, 10, productive=40.0, at_step={4: 0.0})
    first = goodput.account([lost, again])["attempts"][0]
    assert first["lost_steps"] == 2
    assert first["seconds"]["wasted_progress_from_disruption"] == pytest.approx(20.0)


def test_the_attempt_file_keeps_earlier_attempts_and_starts_over_when_damaged(tmp_path, capsys):
    (tmp_path / goodput.FILE).write_text(json.dumps({"attempts": [KILLED]}))
    mine = goodput.Attempt(tmp_path)
    mine.resumed(4)
    mine.step_done(5)
    mine.close()
    attempts = goodput.read_attempts(tmp_path / goodput.FILE)
    assert [a["id"] for a in attempts] == [KILLED["id"], mine.record["id"]]
    assert attempts[1]["resumed_from"] == 4 and attempts[1]["reached"] == 5

    (tmp_path / goodput.FILE).write_text('{"attempts": [{"id": "x"}]}')
    with pytest.raises(UserError, match="its attempts are not zoo's records"):
        goodput.run_account(str(tmp_path))
    (tmp_path / goodput.FILE).write_text("{not json")
    fresh = goodput.Attempt(tmp_path)
    fresh.close()
    assert "goodput account starts again" in capsys.readouterr().err
    assert [a["id"] for a in goodput.read_attempts(tmp_path / goodput.FILE)] == [
        fresh.record["id"]]


def test_goodput_of_a_folder_that_is_not_a_run_is_one_line(tmp_path):
    with pytest.raises(UserError, match="is not a run folder"):
        goodput.run_account(str(tmp_path))
    (tmp_path / "config.yaml").write_text(saved_config("model_name: llama-tiny\n"))
    with pytest.raises(UserError, match="has no goodput.json"):
        goodput.run_account(str(tmp_path))


def test_the_breakdown_is_drawn_into_a_folder_it_makes(tmp_path):
    path = tmp_path / "plots" / "new" / "goodput.png"
    goodput.plot(goodput.account([KILLED, RESUMED]), path)
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_each_bar_starts_with_start_up_and_spans_its_attempts_wall_time():
    """Start-up is drawn first, from the attempt's own start, never after training; the
    axis says it is a breakdown, not a timeline of the loop's interleaved phases."""
    summary = goodput.account([KILLED, RESUMED])
    segments = goodput.bars(summary)
    for index, row in enumerate(summary["attempts"]):
        mine = [(category, left, width) for i, category, left, width in segments
                if i == index]
        assert [category for category, _, _ in mine][:3] == [
            "training_prep", "unproductive_checkpoint_restore_time", "program_startup"]
        assert mine[0][1] == 0.0
        for (_, left, width), (_, next_left, _) in zip(mine, mine[1:]):
            assert next_left == pytest.approx(left + width)  # contiguous, no overlap
        assert mine[-1][1] + mine[-1][2] == pytest.approx(row["wall_s"])
    assert "breakdown" in goodput.PLOT_AXIS and "since" not in goodput.PLOT_AXIS


def recorded_run(folder):
    folder.mkdir()
    (folder / "config.yaml").write_text(saved_config("model_name: llama-tiny\n"))
    (folder / goodput.FILE).write_text(json.dumps({"attempts": [KILLED, RESUMED]}))
    return folder


def zoo_goodput(*args):
    from click.testing import CliRunner

    from tools.cli import cli

    began = time.monotonic()
    result = CliRunner().invoke(cli, ["goodput", *map(str, args)])
    return result, time.monotonic() - began


def test_plot_into_a_folder_writes_goodput_png_there_and_prints_it(tmp_path):
    run, plots = recorded_run(tmp_path / "run"), tmp_path / "plots"
    plots.mkdir()
    result, _ = zoo_goodput(run, "--plot", plots)
    assert result.exit_code == 0, result.output
    assert (plots / "goodput.png").read_bytes()[:4] == b"\x89PNG"
    assert result.output.splitlines()[-1] == f"plot: {plots / 'goodput.png'}"
    result, _ = zoo_goodput(run, "--plot", tmp_path / "missing" / "g.png")
    assert result.exit_code == 0, result.output
    assert (tmp_path / "missing" / "g.png").is_file()


@pytest.mark.parametrize("target, said", [
    ("run/config.yaml", "config.yaml: a file, not a folder; give the --out of a zoo train run"),
    ("gs://zoo-no-such-bucket/run", "check the network"),
])
def test_goodput_of_a_file_or_an_unreachable_bucket_is_one_line_in_seconds(tmp_path, target,
                                                                          said):
    recorded_run(tmp_path / "run")
    result, seconds = zoo_goodput(target if "://" in target else tmp_path / target)
    assert result.exit_code in (1, 2) and "Traceback" not in result.output
    assert said in result.output and len(result.output.strip().splitlines()) == 1, result.output
    assert seconds < 10


@pytest.mark.parametrize("plot, said", [
    ("g.txt", "g.txt: not a .png name; give a .png file or a folder"),
    ("run/config.yaml/g.png", "config.yaml is a file, not a folder"),
])
def test_a_plot_path_that_cannot_be_a_png_is_one_line(tmp_path, plot, said):
    run = recorded_run(tmp_path / "run")
    result, _ = zoo_goodput(run, "--plot", tmp_path / plot)
    assert result.exit_code == 2 and said in result.output, result.output
    assert len(result.output.strip().splitlines()) == 1
    assert not (tmp_path / "g.txt").exists()


def test_an_attempt_starts_with_the_program_not_a_shell_that_ran_setup_first(tmp_path):
    """`bash -c "./setup_vm.sh && zoo train ..."` execs zoo in the shell's own process: the
    process was created before the setup ran, the program after (the command line marks
    it). Here the shell sleeps 2 s first."""
    program = ("import sys, time; from core import goodput, program_start; {mark}"
               "attempt = goodput.Attempt(sys.argv[1], write=False); "
               "print(time.time() - attempt.started)")
    ages = []
    for mark in ("", "program_start.mark(); "):
        shell = f'sleep 2 && {sys.executable} -c "{program.format(mark=mark)}" {tmp_path}'
        result = subprocess.run(["bash", "-c", shell], capture_output=True, text=True,
                                cwd=ROOT, check=True)
        ages.append(float(result.stdout))
    unmarked, marked = ages
    assert unmarked >= 2.0 > 1.0 > marked  # the shell's sleep: counted only without the mark
