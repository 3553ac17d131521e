"""The command line: a real run with a trace file, and one clear line for every kind of bad input."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from playground.cli import main
from playground.outside import for_terminal
from playground.trace import Trace, check_invariants
from tiny import build_other_tokenizer, save_tiny_llama

ROOT = Path(__file__).resolve().parents[1]
PROMPT = "One, two, three, four, five. One, two,"


@pytest.fixture(scope="module")
def foreign(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A tiny model whose tokenizer has the same size as the target's but other ids."""
    path = tmp_path_factory.mktemp("foreign") / "model"
    return str(save_tiny_llama(path, seed=3, layers=2, hidden=32, tokenizer=build_other_tokenizer()))


def test_run_prints_output_and_summary_and_writes_the_trace(tiny_models, tmp_path, capsys):
    out = tmp_path / "trace.json"
    code = main(["run", "--target", tiny_models["target"], "--method", "prompt_lookup", "--set",
                 "prompt_lookup_num_tokens=4", "--prompt", PROMPT, "--max-new-tokens", "12", "--dtype", "float32",
                 "--trace-out", str(out)])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    assert "[prompt_lookup] 12 tokens in" in captured.out
    trace = Trace.load(out)
    check_invariants(trace)
    assert trace.params["prompt_lookup_num_tokens"] == 4
    assert trace.summary.new_tokens == 12
    # The output as the terminal may show it: this tiny model writes control characters (\x1d), each as `\u001d`.
    assert for_terminal(trace.output_text) in captured.out
    assert trace.env["dtype"] == "float32"


def test_prompt_file_and_quiet(tiny_models, tmp_path, capsys):
    prompt = tmp_path / "prompt.txt"
    prompt.write_text(PROMPT, encoding="utf-8")
    assert main(["run", "--target", tiny_models["target"], "--prompt-file", str(prompt), "--max-new-tokens", "3",
                 "--quiet"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("[baseline] 3 tokens")


BAD_INPUT = [
    # (case, extra arguments, environment, expected fragment of the one-line reason)
    ("empty prompt", ["--prompt", "  "], {}, "prompt is empty"),
    ("prompt longer than the context", ["--prompt", "one two three " * 300], {}, "context"),
    ("prompt over the configured cap", ["--prompt", PROMPT], {"PLAYGROUND_MAX_PROMPT_TOKENS": "5"}, "PLAYGROUND_MAX_PROMPT_TOKENS"),
    ("max new tokens out of range", ["--max-new-tokens", "100000"], {}, "max new tokens must be between 1 and"),
    ("unknown Hub id", ["--target", "nobody-here/no-such-model"], {"HF_HUB_OFFLINE": "1"}, "Hub"),
    ("malformed model name", ["--target", "../../etc/passwd"], {}, "etc/passwd"),
    ("missing local directory", ["--target", "/nonexistent/model/dir"], {}, "/nonexistent/model/dir"),
    ("directory that is not a model", ["--target", "NOT_A_MODEL"], {}, "config.json"),
    ("assistant with another tokenizer under speculative", ["--method", "speculative", "--assistant", "FOREIGN"], {},
     "universal"),
    ("use_mtp on a model without MTP layers", ["--method", "mtp"], {}, "no multi-token-prediction layers"),
    ("early-exit layer out of range", ["--method", "early_exit", "--set", "assistant_early_exit=9"], {},
     "between 1 and 3"),
    ("ensemble weight outside (0, 1)", ["--method", "speculative", "--assistant", "TARGET", "--set",
                                       "assistant_ensemble_weight=1.5"], {}, "between 0.05 and 1"),
    ("ensemble weight without draft logits", ["--method", "universal", "--assistant", "FOREIGN", "--set",
                                             "assistant_ensemble_weight=0.5"], {}, "needs draft logits"),
    ("temperature <= 0 with sampling", ["--sample", "--temperature", "0"], {}, "temperature must be above 0"),
    ("unknown method parameter", ["--method", "prompt_lookup", "--set", "speed=11"], {}, "has no parameter 'speed'"),
    ("malformed --set", ["--set", "novalue"], {}, "KEY=VALUE"),
    ("model too large for the memory budget", ["--target", "FRESH"], {"PLAYGROUND_MEMORY_BUDGET_GB": "0.00001"},
     "PLAYGROUND_MEMORY_BUDGET_GB"),
    ("public mode refuses local paths", [], {"PLAYGROUND_PUBLIC": "1"}, "public"),
    ("--preset with options the preset sets", ["--preset", "early-exit-offline"], {},
     "--preset sets the models, method, parameters and decoding itself; drop --target, --max-new-tokens"),
]


@pytest.mark.parametrize("case, args, env, fragment", BAD_INPUT, ids=[c[0] for c in BAD_INPUT])
def test_bad_input_gets_one_clear_line(case, args, env, fragment, tiny_models, foreign, tmp_path, monkeypatch, capsys):
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    not_a_model = tmp_path / "not-a-model"
    not_a_model.mkdir()
    (not_a_model / "notes.txt").write_text("hello")
    if "FRESH" in args:  # a model no earlier test has loaded into the shared store
        save_tiny_llama(tmp_path / "fresh", seed=4, layers=2, hidden=32)
    names = {"FRESH": str(tmp_path / "fresh"), "FOREIGN": foreign, "TARGET": tiny_models["target"], "NOT_A_MODEL": str(not_a_model)}
    args = [names.get(a, a) for a in args]
    base = ["run", "--target", tiny_models["target"], "--prompt", PROMPT, "--max-new-tokens", "4"]
    code = main(base + args)
    err = capsys.readouterr().err.strip()
    assert code == 2, case
    assert err.startswith("error: ") and "\n" not in err, err
    assert "Traceback" not in err
    assert fragment in err, err


def test_corrupt_trace_file_is_refused(tmp_path, capsys):
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"hello": "world"}))
    assert main(["show", str(bad)]) == 2
    assert "not a playground trace" in capsys.readouterr().err


def test_show_summarises_a_saved_trace(tiny_models, tmp_path, capsys):
    out = tmp_path / "t.json"
    assert main(["run", "--target", tiny_models["target"], "--prompt", PROMPT, "--max-new-tokens", "3",
                 "--trace-out", str(out), "--quiet"]) == 0
    capsys.readouterr()
    assert main(["show", str(out)]) == 0
    assert "[baseline] 3 tokens" in capsys.readouterr().out


@pytest.mark.slow
def test_real_process_exit_status(tiny_models):
    """The contract as a script sees it: non-zero status and a single line on stderr."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    result = subprocess.run(
        [sys.executable, "-m", "playground", "run", "--target", tiny_models["target"], "--prompt", ""],
        capture_output=True, text=True, env=env, cwd=ROOT, timeout=300,
    )
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == ["error: the prompt is empty: type something for the model to continue"]
