"""`python -m playground code TRACE.json`: the printed script reproduces the saved run, token for token.

For every method family, greedy and seeded sampling, a run on the tiny checkpoints of
`tests/tiny.py` is saved as a trace; the code command prints its script; the scripts run in fresh
Python processes outside the repository (they must not need the playground), two processes side by
side, each running its share of the scripts one after the other (one process per script would cost
a torch import each), and the tokens they generate are compared with the trace's output_ids.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from playground import cli
from playground.engine import LiveRun, RunRequest, prepare
from playground.trace import Trace
from tiny import CLI_EXAMPLES, CLI_PROMPT, write_tiny_checkpoints

MARKER = "NEW_TOKENS="
# Runs each script given on the command line as __main__, in turn, and prints the tokens it generated.
RUNNER = f"""
import json, runpy, sys
for path in sys.argv[1:]:
    namespace = runpy.run_path(path, run_name="__main__")
    print({MARKER!r} + json.dumps([path, namespace["new_tokens"].tolist()]), flush=True)
"""
CASES = [(example, sample) for sample in (False, True) for example in CLI_EXAMPLES]


def _case_id(case) -> str:
    (method, *_), sample = case
    return f"{method}-{'sampling' if sample else 'greedy'}"


pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module")
def reproduced(store, tmp_path_factory) -> dict[str, tuple[Trace, str, list[int] | None, str]]:
    """case id -> (trace, printed script, tokens the script generated or None, error text)."""
    work = tmp_path_factory.mktemp("code_command")
    ckpt = write_tiny_checkpoints(work / "models")
    results: dict[str, tuple[Trace, str, list[int] | None, str]] = {}
    scripts: dict[str, Path] = {}
    for case in CASES:
        (method, target, assistant, params), sample = case
        name = _case_id(case)
        request = RunRequest(prompt=CLI_PROMPT, target=str(ckpt[target]), method=method,
                             assistant=str(ckpt[assistant]) if assistant else None, params=dict(params),
                             max_new_tokens=16, dtype="float32", chat=False, sample=sample, seed=11,
                             temperature=0.8, top_k=40)
        trace = LiveRun(prepare(request, store)).run()
        trace_file = work / f"{name}.json"
        trace.save(trace_file)
        script = _printed_script(trace_file)
        scripts[name] = work / f"{name}.py"
        scripts[name].write_text(script)
        results[name] = (trace, script, None, "")
    runner = work / "runner.py"
    runner.write_text(RUNNER)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env.update(HF_HUB_OFFLINE="1", TRANSFORMERS_VERBOSITY="error", TOKENIZERS_PARALLELISM="false",
               OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    names = list(scripts)
    shares = [names[0::2], names[1::2]]

    def run_share(share: list[str]) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, str(runner), *(str(scripts[n]) for n in share)], cwd=work, env=env,
                              capture_output=True, text=True, timeout=900)

    with ThreadPoolExecutor(max_workers=2) as pool:
        procs = list(pool.map(run_share, shares))
    by_path = {str(path): name for name, path in scripts.items()}
    for share, proc in zip(shares, procs):
        for line in proc.stdout.splitlines():
            if line.startswith(MARKER):
                path, tokens = json.loads(line[len(MARKER):])
                trace, script, _, _ = results[by_path[path]]
                results[by_path[path]] = (trace, script, tokens, "")
        for name in share:
            trace, script, tokens, _ = results[name]
            if tokens is None:
                results[name] = (trace, script, None, f"rc={proc.returncode}\n{proc.stderr[-3000:]}")
    return results


def _printed_script(trace_file: Path) -> str:
    """What `python -m playground code TRACE.json` prints (run in this process: the models are loaded once)."""
    import contextlib
    import io

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = cli.main(["code", str(trace_file)])
    assert code == 0, err.getvalue()
    return out.getvalue()


@pytest.mark.slow
@pytest.mark.parametrize("case", CASES, ids=_case_id)
def test_printed_script_reproduces_the_saved_trace(reproduced, case) -> None:
    trace, script, tokens, error = reproduced[_case_id(case)]
    assert tokens is not None, f"{error}\n--- script ---\n{script}"
    assert len(trace.output_ids) > 0
    assert tokens == trace.output_ids, script
    if case[1]:
        assert "torch.manual_seed(11)" in script


@pytest.mark.slow
def test_universal_sampling_script_repeats_the_playgrounds_adaptations(reproduced) -> None:
    """The script says why it differs from a bare generate() call, and without those steps the run differs."""
    trace, script, tokens, _ = reproduced["universal-sampling"]
    assert "assistant_tokenizer.get_vocab = lambda" in script and "assistant_prune_lm_head=True" in script
    assert "without these steps plain generate()" in script
    for other in ("universal-greedy", "speculative-sampling"):
        assert "AssistantVocabTranslatorCache" not in reproduced[other][1]
    start = script.index("\n# The playground adapts the assistant")
    end = script.index("assistant_prune_lm_head=True,\n)\n") + len("assistant_prune_lm_head=True,\n)\n")
    namespace: dict = {}
    exec(compile(script[:start] + "\n" + script[end:], "<bare generate()>", "exec"), namespace)  # noqa: S102
    assert namespace["new_tokens"].tolist() != trace.output_ids, "the adaptations make no difference here"


@pytest.mark.parametrize("content, message", [
    (None, "cannot read"),
    ("{not json", "not"),
])
def test_code_command_refuses_a_bad_trace_in_one_line(tmp_path: Path, capsys, content, message) -> None:
    path = tmp_path / "trace.json"
    if content is not None:
        path.write_text(content)
    assert cli.main(["code", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and len(err.strip().splitlines()) == 1 and message in err
