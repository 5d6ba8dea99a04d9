"""The goodput account (core/goodput.py) from attempts recorded by hand: the categories sum
to each attempt's wall time, the work a restart did again moves from productive to wasted,
and the file an attempt keeps survives damage and earlier attempts."""

import json
import subprocess
import sys

import pytest

from core import goodput
from core.errors import UserError
from tests.support.paths import ROOT


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
    (tmp_path / "config.yaml").write_text("model_name: llama-tiny\n")
    with pytest.raises(UserError, match="has no goodput.json"):
        goodput.run_account(str(tmp_path))


def test_the_timeline_is_drawn(tmp_path):
    path = tmp_path / "goodput.png"
    goodput.plot(goodput.account([KILLED, RESUMED]), path)
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


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
