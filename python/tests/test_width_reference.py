"""The width faults of finding 16 against their independent numpy implementation
(references/check_width.py), on a 576-wide synthesized checkpoint: hefprobe's emulator with each
fault planted, every tap the fault writes recomputed from the capture's upstream taps.

Needs numpy and the command line only (not the Python module): CI's Python tier runs it with the
wheel's console script; elsewhere set HEFPROBE_CLI to a built binary."""

import os
import pathlib
import shutil
import subprocess
import sys

import pytest

REPO = pathlib.Path(__file__).resolve().parents[2]
CHECK = REPO / "references" / "check_width.py"


def cli():
    found = os.environ.get("HEFPROBE_CLI") or shutil.which("hefprobe", path=str(pathlib.Path(sys.executable).parent))
    if not found:
        pytest.fail("no hefprobe binary: install the wheel or set HEFPROBE_CLI")
    return found


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    out = tmp_path_factory.mktemp("width") / "ck576"
    done = subprocess.run([cli(), "synth", "--preset", "smollm2-135m", "--layers", "2", "--vocab", "512",
                           "--massive-channels", "4", "--seed", "3", "-o", str(out)],
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    return out


def emulate(checkpoint, tmp_path, fault):
    probe = tmp_path / "p.toml"
    probe.write_text(
        'version = 1\nname = "width"\nquestion = "width"\n\n'
        f'[checkpoint]\npath = "{checkpoint}"\n\n'
        '[inputs]\ntokens = [11, 64, 117, 170, 223, 276, 329, 382, 435, 488]\ndecode = 2\n\n'
        f'[[backend]]\nname = "emu"\nkind = "emulator"\nfaults = ["{fault}"]\n')
    caps = tmp_path / "caps"
    done = subprocess.run([cli(), "run", str(probe), "--no-explain", "--save-captures", str(caps)],
                          capture_output=True, text=True)
    assert done.returncode in (0, 1), done.stderr
    return caps / "emu.npz"


def check(checkpoint, capture, fault):
    return subprocess.run([sys.executable, str(CHECK), str(checkpoint), str(capture), fault],
                          capture_output=True, text=True)


@pytest.mark.parametrize("fault", [
    "tile-sum:512",
    "tile-sum:256,mode=saturate,bits=16",
    "norm-acc:16",
    "norm-acc:16,target=softmax",
    "norm-width:512",
    "norm-width:256,pad@layers=1",
    "tile-scale:384",
])
def test_the_emulation_equals_the_independent_definition(checkpoint, tmp_path, fault):
    done = check(checkpoint, emulate(checkpoint, tmp_path, fault), fault)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "MISMATCH" not in done.stdout


@pytest.mark.parametrize("planted, claimed", [
    ("tile-sum:512", "tile-sum:256"),
    ("norm-width:512", "norm-width:512,pad"),
    ("tile-scale:512", "tile-scale:256"),
    ("norm-acc:16", "norm-width:512"),
])
def test_the_check_fails_on_another_fault(checkpoint, tmp_path, planted, claimed):
    done = check(checkpoint, emulate(checkpoint, tmp_path, planted), claimed)
    assert done.returncode == 1 and "MISMATCH" in done.stdout, done.stdout + done.stderr
