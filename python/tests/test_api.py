"""The Python module against the wheel `.ci/run` builds: a DFC-like workflow, the README's
result, hostile inputs, and round trips with the command line's captures."""

import json
import pathlib
import re
import shutil
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

import hefprobe


def console_script():
    """The `hefprobe` the wheel installed beside this interpreter."""
    cli = shutil.which("hefprobe", path=str(pathlib.Path(sys.executable).parent))
    assert cli, "the wheel installs the hefprobe console script"
    return cli


def noisy(a, scale, seed=0):
    rng = np.random.default_rng(seed)
    return (a + scale * float(np.std(a)) * rng.standard_normal(a.shape)).astype(np.float32)


def test_a_dict_of_emulator_arrays_is_compared_and_its_first_drift_located(ref):
    # What a DFC emulator gives: arrays by name; here the reference's, drifting from layer 3's MLP.
    dev = {k: np.array(ref[k]) for k in ref}
    assert hefprobe.compare(ref, dev).passed
    for k in dev:
        layer = re.match(r"[^/]+/layers\.(\d+)\.", k)
        if (layer and int(layer.group(1)) >= 3 and not k.endswith(("attn_norm", "attn.q", "attn.k", "attn.v",
                                                                   "attn.scores", "attn.probs", "attn.out")))\
                or k.endswith(("final_norm", "logits")):
            dev[k] = noisy(dev[k], 0.5)
    report = hefprobe.compare(ref, dev)
    assert not report.passed
    assert report.first_drift["tap"] == "layers.3.mlp_norm"
    assert report.first_drift["phase"] == "prefill"
    failing = {r["tap"] for r in report.rows if r["failures"]}
    assert "layers.2.out" not in failing and "logits" in failing


def test_the_readmes_shared_softmax_result(repo):
    readme = (repo / "README.md").read_text()
    m = re.search(r"first drift at (\S+) — cosine ([0-9.]+)", readme)
    report = hefprobe.run(repo / "probes" / "shared-softmax.toml")
    assert not report.passed
    assert report.first_drift["tap"] == m.group(1)
    assert f"{report.first_drift['cosine']:.6f}" == m.group(2)
    assert report.best_explanation == "shared-softmax@layers=0"
    assert "shared-softmax" in report.to_markdown()
    assert json.loads(report.to_json())["schema"] == "hefprobe.report/1"
    assert report._repr_html_().startswith("<pre>")


def test_report_renders_svgs_and_rows(ref, tmp_path):
    dev = {k: noisy(ref[k], 0.3) if k.endswith("logits") else ref[k] for k in ref}
    report = hefprobe.compare(ref, dev, thresholds={"logits:cosine": 0.9999})
    svgs = report.to_svg(tmp_path / "fig")
    assert svgs and all(p.endswith(".svg") and (tmp_path / p.split("/")[-1]).exists() for p in svgs)
    logits = [r for r in report.rows if r["tap"] == "logits"]
    assert logits and all(r["failures"] for r in logits)


def test_captures_are_read_only_views_shared_with_numpy(ref):
    a = ref["prefill/layers.0.attn.probs"]
    assert a.dtype == np.float32 and a.shape == (6, 6, 6)
    assert not a.flags.writeable and not a.flags.owndata
    with pytest.raises(ValueError):
        a[0, 0, 0] = 1.0
    assert np.allclose(a.sum(-1), 1.0, atol=1e-5)
    assert len(ref) == len(list(ref)) and "prefill/logits" in ref and "nope/logits" not in ref
    with pytest.raises(KeyError):
        ref["prefill/nothing"]


def test_round_trips_with_the_command_lines_npz(ref, tmp_path):
    cli = console_script()
    ours = tmp_path / "py.npz"
    ref.save(ours)
    # Python's capture, read by numpy and by the command line.
    with np.load(ours) as z:
        assert sorted(z.files) == sorted(ref.keys())
        assert all(np.array_equal(z[k], ref[k]) for k in z.files)
    theirs = tmp_path / "cli.npz"
    done = subprocess.run([cli, "reference", "--synth", "tinystories", "--tokens", "5,17,301,4,99,23",
                           "--decode", "2", "-o", str(theirs)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    back = hefprobe.Capture.load(theirs)
    assert back.keys() == ref.keys()
    assert all(np.array_equal(back[k], ref[k]) for k in ref)
    assert subprocess.run([cli, "compare", str(ours), str(theirs)], capture_output=True).returncode == 0
    assert hefprobe.compare(ours, theirs).passed


@pytest.mark.parametrize(
    "call, names",
    [
        (lambda p: hefprobe.compare(p / "missing.npz", p / "missing.npz"), "missing.npz"),
        (lambda p: hefprobe.compare(p / "garbage.npz", p / "garbage.npz"), "garbage.npz"),
        (lambda p: hefprobe.compare({"prefill/logits": np.zeros((2, 3))}, {"prefill/x": np.zeros(3)}), "shares no"),
        (lambda p: hefprobe.compare({"prefill/logits": np.zeros((2, 3))}, {"prefill/logits": np.zeros((7,))}),
         "prefill/logits"),
        (lambda p: hefprobe.compare({"prefill/logits": "text"}, {}), "prefill/logits"),
        (lambda p: hefprobe.compare(42, {}), "int"),
        (lambda p: hefprobe.compare({"prefill/logits": np.ones(3)}, {"prefill/logits": np.ones(3)},
                                    thresholds=["cosine=banana"]), "banana"),
        (lambda p: hefprobe.run(p / "missing.toml"), "missing.toml"),
        (lambda p: hefprobe.run(p / "garbage.npz"), "garbage.npz"),
        (lambda p: hefprobe.audit(p / "garbage.npz"), "garbage.npz"),
        (lambda p: hefprobe.reference(p / "missing-folder", tokens=[1]), "missing-folder"),
        (lambda p: hefprobe.reference(synth="no-such-preset", tokens=[1]), "no-such-preset"),
        (lambda p: hefprobe.reference(synth="tinystories", tokens=[1], decode=10**9), "decode"),
        (lambda p: hefprobe.reference(synth="tinystories", tokens=[10**9]), "1000000000"),
        (lambda p: hefprobe.reference(synth="tinystories", tokens=[1, -1]), "tokens[1]"),
        (lambda p: hefprobe.reference(synth="tinystories", tokens=[2**40]), "tokens[0]"),
        (lambda p: hefprobe.reference(synth="tinystories", tokens=[1], decode=-1), "decode"),
        (lambda p: hefprobe.reference(synth="tinystories", tokens=[1], chunk=2**64), "chunk"),
        (lambda p: hefprobe.reference(synth="tinystories", tokens=[1], taps="layers.99.out"), "layers.99"),
    ],
)
def test_hostile_inputs_raise_input_error_naming_what(call, names, tmp_path):
    (tmp_path / "garbage.npz").write_bytes(b"PK\x03\x04" + bytes(range(256)) * 7)
    with pytest.raises(hefprobe.InputError, match=re.escape(names)):
        call(tmp_path)


def test_a_float64_array_is_compared_as_float32_and_said(ref):
    dev = {k: np.asarray(ref[k], dtype=np.float64) for k in ref}
    with pytest.warns(UserWarning, match="float64"):
        assert hefprobe.compare(ref, dev).passed


def test_ctrl_c_stops_a_long_run_with_keyboard_interrupt(repo):
    # Runs until interrupted (one run can end before the signal on a fast machine); the signal
    # is sent once the module is imported, so it lands in a run, not in the import.
    script = (
        "import hefprobe, sys\n"
        "print('ready', flush=True)\n"
        "try:\n"
        "    while True:\n"
        f"        hefprobe.run({str(repo / 'probes' / 'shared-softmax.toml')!r})\n"
        "except KeyboardInterrupt:\n"
        "    print('interrupted'); sys.exit(7)\n"
    )
    # SIGINT at its default in the child, so Python installs its KeyboardInterrupt handler there:
    # a shell without job control starts background jobs with SIGINT ignored, which the child
    # inherits (pytest run as `... &` from a script then hung here until the timeout).
    default_sigint = lambda: signal.signal(signal.SIGINT, signal.SIG_DFL)  # noqa: E731
    p = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True, preexec_fn=default_sigint)
    assert p.stdout.readline().strip() == "ready"
    time.sleep(1.5)
    p.send_signal(signal.SIGINT)
    out, _ = p.communicate(timeout=60)
    assert p.returncode == 7 and "interrupted" in out


def test_the_console_script_is_the_command_line(repo):
    cli = console_script()
    v = subprocess.run([cli, "--version"], capture_output=True, text=True)
    assert v.returncode == 0 and v.stdout.startswith("hefprobe ")
    bad = subprocess.run([cli, "compare", "missing.npz", "missing.npz"], capture_output=True, text=True)
    assert bad.returncode == 2 and "missing.npz" in bad.stderr


def test_synth_hef_writes_a_hef_whose_planted_fault_run_finds(repo, tmp_path):
    hef = tmp_path / "faulty.hef"
    made = hefprobe.synth_hef(hef, synth="tinystories", fault="shared-softmax@layers=1")
    assert made["faults"] == ["shared-softmax@layers=1"] and made["quant"] == "a16"
    assert made["path"] == str(hef) and hef.stat().st_size > 0
    assert hefprobe.audit(hef).passed
    report = hefprobe.run(repo / "probes" / "shared-softmax.toml", backend=f"hef={hef}")
    assert not report.passed
    assert report.best_explanation.startswith("shared-softmax@layers=1")
    clean = tmp_path / "clean.hef"
    hefprobe.synth_hef(clean, synth="tinystories")
    assert hefprobe.run(repo / "probes" / "shared-softmax.toml", backend=f"hef={clean}").passed


@pytest.mark.parametrize(
    "options, names",
    [
        ({"fault": "no-such-fault"}, "no-such-fault"),
        ({"expose_quant": "bogus"}, "bogus"),
        ({"quant": "w3a99"}, "w3a99"),
        ({"prefill_tokens": -4}, "prefill_tokens"),
        ({"layers": (0, 99)}, "99"),
        ({"calib_tokens": [[1, -2]]}, "calib_tokens[0][1]"),
    ],
)
def test_synth_hef_refuses_what_it_cannot_write_naming_it(options, names, tmp_path):
    with pytest.raises(hefprobe.InputError, match=re.escape(names)):
        hefprobe.synth_hef(tmp_path / "x.hef", synth="tinystories", **options)


def test_progress_can_be_asked_for_where_stderr_is_not_a_terminal(repo):
    script = (
        "import hefprobe\n"
        "hefprobe.set_progress(MODE)\n"
        f"hefprobe.run({str(repo / 'probes' / 'shared-softmax.toml')!r})\n"
    )
    runs = {}
    for mode in ("True", "None", "False"):
        done = subprocess.run([sys.executable, "-c", script.replace("MODE", mode)], capture_output=True)
        assert done.returncode == 0, done.stderr
        runs[mode] = done.stderr.decode()
    # Redrawn in place on sys.stderr, as tqdm draws: a carriage return, then the bar's line.
    assert "\rreference [" in runs["True"] or "\r\u2801 reference [" in runs["True"], runs["True"]
    assert "reference [" not in runs["None"] and "reference [" not in runs["False"]
    with pytest.raises(hefprobe.InputError, match="loud"):
        hefprobe.set_progress("loud")
