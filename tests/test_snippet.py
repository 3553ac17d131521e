"""Show the code: the printed script and CLI command reproduce the playground's run, token for token.

The scripts run in fresh Python processes, outside the repository (they must not need the playground), on the
tiny checkpoints from conftest: two processes side by side, each running its share of the scripts one after the other
(one process per script would cost a torch import each, as test_code_command.py's scripts do); each printed CLI
command runs as a command of its own.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shlex
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from playground.cli import build_parser
from playground.engine import LiveRun, PreparedRun, RunRequest, prepare
from playground.methods import get_method, parse_assignments
from playground.snippet import cli_args, cli_command, model_location, python_snippet, resolved_request, show_code
from playground.trace import Trace
from test_code_command import MARKER, RUNNER  # runs scripts in turn in one process, printing MARKER + their tokens

REPO = Path(__file__).resolve().parent.parent
PROMPT = "One, two, three, four, five, six, seven, eight, nine, ten. One, two, three,"

# name -> RunRequest fields; model names refer to the tiny_models fixture.
CASES: dict[str, dict[str, Any]] = {
    "baseline": dict(method="baseline"),
    "speculative": dict(method="speculative", assistant="noisy", params={"num_assistant_tokens": 3}),
    "prompt_lookup": dict(method="prompt_lookup", chat=True,
                          params={"prompt_lookup_num_tokens": 4, "max_matching_ngram_size": 3}),
    "early_exit": dict(method="early_exit", chat=False, params={"assistant_early_exit": 2, "num_assistant_tokens": 3}),
    "speculative_sampling": dict(method="speculative", assistant="noisy", sample=True, temperature=0.9, top_k=50,
                                 seed=7, params={"num_assistant_tokens": 3}),
}
CLI_END_TO_END = ("early_exit", "speculative_sampling")  # also run the printed command itself


def _request(tiny_models: dict[str, str], **fields: Any) -> RunRequest:
    fields = dict(fields)
    if fields.get("assistant"):
        fields["assistant"] = tiny_models[fields["assistant"]]
    return RunRequest(prompt=PROMPT, target=tiny_models["target"], dtype="float32", max_new_tokens=20, **fields)


def _request_from_args(args: Any) -> RunRequest:
    """What `python -m playground run` builds from its arguments (as cli.cmd_run does)."""
    return RunRequest(
        prompt=args.prompt, target=args.target, method=args.method, assistant=args.assistant,
        params=parse_assignments(args.assignments), max_new_tokens=args.max_new_tokens, sample=args.sample,
        temperature=args.temperature, top_p=args.top_p, top_k=args.top_k, seed=args.seed, chat=args.chat,
        dtype=args.dtype,
    )


def _parse_command(command: str) -> RunRequest:
    words = shlex.split(command)
    assert words[:4] == ["python", "-m", "playground", "run"]
    return _request_from_args(build_parser().parse_args(words[3:]))


def _normalised(req: RunRequest) -> RunRequest:
    """Method parameters as the registry resolves them (the CLI hands them over as text)."""
    return dataclasses.replace(req, params=get_method(req.method).resolve_params(req.params))


def _generate_call(code: str) -> str:
    start = code.index("model.generate(")
    return code[start: code.index("\n)", start) + 1]


@dataclasses.dataclass
class Case:
    request: RunRequest
    prepared: PreparedRun
    trace: Trace
    code: str
    snippet_tokens: list[int] | None = None
    snippet_error: str = ""
    cli_tokens: list[int] | None = None
    cli_error: str = ""


def _run(command: list[str], cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=600)


def _failed(what: str, proc: subprocess.CompletedProcess) -> str:
    return f"{what} failed (rc={proc.returncode}):\n{proc.stderr[-3000:]}"


@pytest.fixture(scope="module")
def cases(tiny_models, store, tmp_path_factory) -> dict[str, Case]:
    """Every case run by the playground, by its printed script and (some) by its printed command."""
    work = tmp_path_factory.mktemp("snippets")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env.update(HF_HUB_OFFLINE="1", TRANSFORMERS_VERBOSITY="error", TOKENIZERS_PARALLELISM="false")
    # One thread per process, two processes at a time: more only oversubscribes two cores.
    env.update(OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    built: dict[str, Case] = {}
    scripts: dict[str, Path] = {}
    commands: dict[str, tuple[list[str], Path, dict[str, str]]] = {}
    traces: dict[str, Path] = {}
    for name, fields in CASES.items():
        request = _request(tiny_models, **fields)
        prepared = prepare(request, store)
        code = python_snippet(prepared)
        built[name] = Case(request, prepared, LiveRun(prepared).run(), code)
        # The script leaves the generated ids in `new_tokens`; the runner prints them for the comparison.
        scripts[name] = work / f"{name}.py"
        scripts[name].write_text(code)
        if name in CLI_END_TO_END:
            traces[name] = work / f"{name}.trace.json"
            command = cli_command(resolved_request(prepared)) + f" --quiet --trace-out {shlex.quote(str(traces[name]))}"
            # The printed command says `python`: make that this interpreter.
            cli_env = dict(env, PATH=f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}")
            commands[name] = (["bash", "-c", command], REPO, cli_env)
    runner = work / "runner.py"
    runner.write_text(RUNNER)
    names = list(scripts)
    # Run from an empty directory without PYTHONPATH: the scripts must not need the playground.
    jobs = {("snippets", tuple(share)): ([sys.executable, str(runner), *(str(scripts[n]) for n in share)], work, env)
            for share in (names[0::2], names[1::2])}
    jobs.update({("cli", (name,)): command for name, command in commands.items()})
    with ThreadPoolExecutor(max_workers=2) as pool:
        done = {key: pool.submit(_run, *job) for key, job in jobs.items()}
    by_path = {str(path): name for name, path in scripts.items()}
    for (kind, share), future in done.items():
        proc = future.result()
        if kind == "cli":
            name = share[0]
            if proc.returncode == 0:
                built[name].cli_tokens = Trace.load(traces[name]).output_ids
            else:
                built[name].cli_error = _failed(f"the command of {name}", proc)
            continue
        for line in proc.stdout.splitlines():
            if line.startswith(MARKER):
                path, tokens = json.loads(line[len(MARKER):])
                built[by_path[path]].snippet_tokens = tokens
        for name in share:
            if built[name].snippet_tokens is None:
                built[name].snippet_error = _failed(f"the script of {name}", proc)
    return built


@pytest.mark.slow
@pytest.mark.parametrize("name", list(CASES))
def test_snippet_reproduces_the_run(cases, name):
    case = cases[name]
    assert case.snippet_tokens is not None, f"{case.snippet_error}\n--- script ---\n{case.code}"
    assert len(case.trace.output_ids) > 0
    assert case.snippet_tokens == case.trace.output_ids, case.code


@pytest.mark.slow
@pytest.mark.parametrize("name", CLI_END_TO_END)
def test_printed_cli_command_reproduces_the_run(cases, name):
    case = cases[name]
    assert case.cli_tokens is not None, case.cli_error
    assert case.cli_tokens == case.trace.output_ids


@pytest.mark.slow
def test_draft_length_goes_on_the_assistants_generation_config(cases):
    code = cases["speculative"].code
    assert "assistant_model.generation_config.num_assistant_tokens = 3\n" in code
    assert "num_assistant_tokens" not in _generate_call(code), "generate() ignores draft-length arguments"
    assert "    assistant_model=assistant_model,\n" in _generate_call(code)
    assert all(len(step.drafted) <= 3 for step in cases["speculative"].trace.steps)


@pytest.mark.slow
def test_early_exit_draft_length_goes_on_the_targets_generation_config(cases):
    code = cases["early_exit"].code
    assert "\nmodel.generation_config.num_assistant_tokens = 3\n" in code
    assert "assistant_model" not in code
    call = _generate_call(code)
    assert "    assistant_early_exit=2,\n" in call and "num_assistant_tokens" not in call


@pytest.mark.slow
def test_sampling_case_is_sensitive_to_draft_length(cases, store):
    """The sampled output depends on the draft length, so the matching script must have set it where it counts."""
    case = cases["speculative_sampling"]
    assert "torch.manual_seed(7)" in case.code and "    do_sample=True,\n" in _generate_call(case.code)
    other = dataclasses.replace(case.request, params={"num_assistant_tokens": 6})
    assert LiveRun(prepare(other, store)).run().output_ids != case.trace.output_ids


@pytest.mark.slow
def test_chat_template_is_applied_in_the_script_when_the_run_used_it(cases):
    """Explicit on/off and the default (a local model with a chat template: on), as the engine decided."""
    assert cases["prompt_lookup"].prepared.chat and not cases["early_exit"].prepared.chat
    assert cases["baseline"].request.chat is None
    for case in cases.values():
        assert ("apply_chat_template" in case.code) == case.prepared.chat


@pytest.mark.slow
def test_script_is_built_from_the_engine_kwargs(cases):
    """Every generate() argument the engine passes appears in the script, with its value."""
    for case in cases.values():
        call = _generate_call(case.code)
        for key, value in case.prepared.generate_kwargs.items():
            assert f"\n    {key}=" in call
            if isinstance(value, (bool, int, float, str)):
                assert f"\n    {key}={value!r},\n" in call


def test_self_assisted_speculative_passes_the_target_itself(tiny_models, store):
    prepared = prepare(_request(tiny_models, method="speculative", assistant="target",
                                params={"num_assistant_tokens": 2}), store)
    code = python_snippet(prepared)
    assert "    assistant_model=model,\n" in _generate_call(code)
    assert code.count("from_pretrained(") == 2  # one model, one tokenizer
    assert "\nmodel.generation_config.num_assistant_tokens = 2\n" in code


@pytest.mark.slow
@pytest.mark.parametrize("name", list(CASES))
def test_cli_command_parses_to_the_same_request(cases, name):
    case = cases[name]
    for request in (case.request, resolved_request(case.prepared)):
        command = cli_command(request)
        assert shlex.split(command)[4:] == cli_args(request)
        assert _normalised(_parse_command(command)) == _normalised(request)


@pytest.mark.slow
def test_resolved_command_prepares_the_same_generate_call(cases, store):
    for case in cases.values():
        again = prepare(_parse_command(cli_command(resolved_request(case.prepared))), store)
        assert again.params == case.prepared.params and again.chat == case.prepared.chat
        assert again.draft_config == case.prepared.draft_config
        assert again.generate_kwargs.keys() == case.prepared.generate_kwargs.keys()
        assert again.input_ids.tolist() == case.prepared.input_ids.tolist()


def test_cli_parser_defaults_are_the_request_defaults():
    """cli_args leaves out what equals RunRequest's defaults: the parser must assume the same."""
    parsed = vars(build_parser().parse_args(["run", "--prompt", "x"]))
    for field in dataclasses.fields(RunRequest):
        if field.default is not dataclasses.MISSING and field.name in parsed:
            assert parsed[field.name] == field.default, field.name
    assert _request_from_args(build_parser().parse_args(["run", "--prompt", "x"])) == RunRequest(prompt="x")


def test_cli_command_quotes_awkward_prompts(tiny_models):
    prompt = "It's \"quoted\" $HOME `whoami`; echo hi\nsecond line\t--method baseline"
    request = dataclasses.replace(_request(tiny_models, method="prompt_lookup", params={"max_matching_ngram_size": 1}),
                                  prompt=prompt, chat=False, top_p=0.5)
    parsed = _parse_command(cli_command(request))
    assert parsed.prompt == prompt
    assert _normalised(parsed) == _normalised(request)


def test_cli_args_cover_every_request_field(tiny_models):
    """A field the command could not carry would silently change the run."""
    request = _request(tiny_models, method="speculative", assistant="noisy", sample=True, temperature=0.5,
                       top_p=0.9, top_k=7, seed=3, chat=False, params={"num_assistant_tokens_schedule": "heuristic"})
    request = dataclasses.replace(request, max_new_tokens=11)
    parsed = _parse_command(cli_command(request))
    for field in dataclasses.fields(RunRequest):
        assert getattr(_normalised(parsed), field.name) == getattr(_normalised(request), field.name), field.name


def test_show_code_prepares_a_request(tiny_models, store):
    request = _request(tiny_models, method="baseline")
    view = show_code(request, store)
    assert view.python == python_snippet(prepare(request, store))
    assert view.cli.startswith("python -m playground run --target ")
    compile(view.python, "<snippet>", "exec")


def test_bundled_models_load_from_the_conversion_cache():
    from playground.models import DEFAULT_TARGET, converted_dir

    location, comment = model_location(DEFAULT_TARGET)
    assert location == str(converted_dir(DEFAULT_TARGET).expanduser())
    assert any("gguf" in line.lower() for line in comment)
    assert model_location("HuggingFaceTB/SmolLM2-360M-Instruct") == ("HuggingFaceTB/SmolLM2-360M-Instruct", [])
