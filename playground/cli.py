"""Command line: `python -m playground run|show|code|bench|tune …` for headless runs and scripts.

Bad input exits non-zero with a one-line reason on stderr (`_failed`, one error path for every command);
the trace can be written as JSON.
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
from pathlib import Path
from typing import Any, Callable, Sequence

from .i18n import LANGUAGES
from .methods import METHODS, MethodError, parse_assignments
from .precision import DTYPE_CHOICES
from .request import DEFAULT_METHOD, MAX_NEW_TOKENS, RunRequest, default, new_request


def add_run_arguments(parser: argparse.ArgumentParser, trace_out: bool = True) -> None:
    parser.add_argument("--target", default=default("target"), help="catalogue key, Hub id or local directory")
    parser.add_argument("--assistant", default=None, help="assistant model (speculative, universal, mtp_drafter)")
    parser.add_argument("--method", default=default("method"), choices=list(METHODS))
    parser.add_argument("--set", dest="assignments", action="append", default=[], metavar="KEY=VALUE",
                        help="a method parameter under its generate() name, e.g. prompt_lookup_num_tokens=10")
    parser.add_argument("--preset", metavar="NAME",
                        help="one of the guide's examples (models, method, parameters, decoding, prompt); "
                             "'list' lists them. --prompt/--prompt-file and --dtype may be given with it")
    prompt = parser.add_mutually_exclusive_group()
    prompt.add_argument("--prompt", help="the prompt text (required without --preset)")
    prompt.add_argument("--prompt-file", type=Path, help="read the prompt from a file")
    parser.add_argument("--max-new-tokens", type=int, default=MAX_NEW_TOKENS["run"])
    parser.add_argument("--sample", action="store_true", help="sample instead of greedy decoding")
    parser.add_argument("--temperature", type=float, default=default("temperature"))
    parser.add_argument("--top-p", type=float, default=default("top_p"))
    parser.add_argument("--top-k", type=int, default=default("top_k"), help="0 = off")
    parser.add_argument("--seed", type=int, default=default("seed"))
    chat = parser.add_mutually_exclusive_group()
    chat.add_argument("--chat", dest="chat", action="store_true", default=None, help="apply the chat template")
    chat.add_argument("--no-chat", dest="chat", action="store_false", help="raw prompt, no chat template")
    parser.add_argument("--system", default=None, help="a system message before the prompt (chat template only)")
    parser.add_argument("--chat-template-kwarg", dest="chat_template_kwargs", action="append", default=[],
                        metavar="KEY=VALUE", help="a chat template variable, VALUE as JSON, e.g. enable_thinking=false")
    parser.add_argument("--dtype", default=default("dtype"), choices=DTYPE_CHOICES)
    if trace_out:
        parser.add_argument("--trace-out", type=Path, help="write the trace as JSON here")
    parser.add_argument("--quiet", action="store_true", help="print only the summary line")


def _read_prompt(args: argparse.Namespace) -> str | None:
    if args.prompt is not None:
        return args.prompt
    if args.prompt_file is None:
        return None
    from .outside import read_text_bounded

    try:
        return read_text_bounded(args.prompt_file)  # an endless file stops at the input limit
    except OSError as exc:
        raise SystemExit(f"error: cannot read prompt file: {exc.strerror}") from None
    except UnicodeDecodeError as exc:
        raise SystemExit(f"error: the prompt file is not UTF-8 text (byte {exc.start})") from None


def _failed(exc: BaseException) -> int:
    """A command failed: one `error: …` line on stderr; exit status 130 when interrupted, else 2."""
    from .errors import user_message
    from .outside import for_terminal

    if isinstance(exc, KeyboardInterrupt):
        print("error: interrupted", file=sys.stderr)
        return 130
    print(for_terminal(f"error: {user_message(exc)}"), file=sys.stderr)  # it may quote what was typed
    return 2


def summary_line(trace) -> str:
    s = trace.summary
    acc = "n/a" if s.acceptance_rate is None else f"{s.acceptance_rate:.1%}"
    tps = "n/a" if s.tokens_per_s is None else f"{s.tokens_per_s:.1f}"
    return (
        f"[{trace.method}] {s.new_tokens} tokens in {s.steps} steps ({s.tokens_per_step or 0:.2f}/step), "
        f"acceptance {acc} ({s.accepted}/{s.drafted}), {s.elapsed_s:.2f} s, {tps} tok/s, "
        f"{trace.env.get('dtype')}, finish={trace.finish_reason}{', LOSSY' if trace.lossy else ''}"
    )


# Options a preset sets itself; with --preset they must stay at their defaults.
_PRESET_SETS = ("target", "assistant", "method", "assignments", "max_new_tokens", "sample", "temperature", "top_p",
                "top_k", "seed", "chat", "system", "chat_template_kwargs")


def _template_kwargs(items: list[str]) -> dict[str, Any]:
    """`KEY=VALUE` chat template variables; VALUE is read as JSON (false, 3, "text"), else taken as text."""
    out: dict[str, Any] = {}
    for key, value in parse_assignments(items).items():
        try:
            out[key] = json.loads(value)
        except json.JSONDecodeError:
            out[key] = value
    return out


def request_from_args(args: argparse.Namespace) -> RunRequest:
    """The engine request a parsed `run` command line stands for."""
    prompt = _read_prompt(args)
    if args.preset:
        from .presets import get_preset

        defaults = vars(build_parser().parse_args(["run", "--prompt", ""]))
        changed = [name for name in _PRESET_SETS if getattr(args, name) != defaults[name]]
        if changed:
            options = ", ".join("--" + ("set" if n == "assignments" else n.replace("_", "-")) for n in changed)
            raise MethodError(f"--preset sets the models, method, parameters and decoding itself; drop {options} "
                              "(or run without --preset)")
        from .models import hub_reachable

        preset = get_preset(args.preset)
        reason = preset.unavailable(hub_reachable())
        if reason:
            raise MethodError(reason)
        return preset.request(prompt, dtype=args.dtype)
    if prompt is None:
        raise MethodError("give --prompt, --prompt-file or --preset")
    return new_request(
        prompt, target=args.target, method=args.method, assistant=args.assistant,
        params=parse_assignments(args.assignments), max_new_tokens=args.max_new_tokens, sample=args.sample,
        temperature=args.temperature, top_p=args.top_p, top_k=args.top_k, seed=args.seed, chat=args.chat,
        dtype=args.dtype, system=args.system, chat_template_kwargs=_template_kwargs(args.chat_template_kwargs),
    )


def _loading_progress(args: argparse.Namespace) -> Callable[[str], None] | None:
    """Loading progress for an interactive terminal only (`run`, `convert`): scripts get a single error line, and
    Transformers' own bars and warnings are silenced for them."""
    if not args.quiet and sys.stderr.isatty():
        return lambda msg: print(f"… {msg}", file=sys.stderr, flush=True)
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    hf_logging.set_verbosity_error()
    return None


def cmd_run(args: argparse.Namespace) -> int:
    from .models import gc_paused

    with gc_paused():  # torch and Transformers import in bulk: seconds of collector passes otherwise
        from .engine import run

    if args.preset == "list":
        from .models import hub_reachable
        from .presets import listing

        print(listing(hub_reachable()))
        return 0
    progress = _loading_progress(args)
    try:
        request = request_from_args(args)
        trace = run(request, progress=progress)
    except (KeyboardInterrupt, Exception) as exc:  # one line for the user, whatever failed
        return _failed(exc)
    if not args.quiet:
        _print_safe(trace.output_text)  # a model writes any character: none of its controls reaches the terminal raw
    _print_safe(summary_line(trace))
    if args.trace_out:
        trace.save(args.trace_out)
    return 0


def cmd_convert(args: argparse.Namespace) -> int:
    """Convert bundled models now (and keep the copy in the dtype `--dtype` picks), so later starts load them."""
    from .models import SPEED_MODEL, bundled_entry, ensure_dtype_copy, ensure_local, ensure_measured, \
        resolve_precision

    progress = _loading_progress(args)
    try:
        if args.dtype == "auto" and SPEED_MODEL in [bundled_entry(spec).key for spec in args.models]:
            ensure_measured(progress)  # what `auto` decides by, measured with the conversion (once per machine)
        precision = resolve_precision(args.dtype)
        for spec in args.models:
            directory = ensure_local(bundled_entry(spec), progress)
            line = f"{spec}: {directory}"
            if precision.dtype != "float32" and (copy := ensure_dtype_copy(directory, precision.dtype, progress)):
                line += f" (and its {precision.dtype} copy: {copy})"
            if not args.quiet:
                print(line)
    except (KeyboardInterrupt, Exception) as exc:
        return _failed(exc)
    return 0


def _load_trace(path: Path):
    """The trace at path (read only up to the input limit), or None after a one-line error on stderr."""
    from .errors import PlaygroundError
    from .outside import for_terminal
    from .trace import Trace, TraceFormatError

    try:
        return Trace.load(path)
    except OSError as exc:
        print(for_terminal(f"error: cannot read {path}: {exc.strerror}"), file=sys.stderr)
    except (TraceFormatError, PlaygroundError) as exc:
        print(for_terminal(f"error: {path}: {exc}"), file=sys.stderr)
    return None


def _print_safe(text: str, **kwargs: Any) -> None:
    """Print what a file holds (a trace's names, texts, token texts) with no control or bidi character raw."""
    from .outside import for_terminal

    print(for_terminal(text), **kwargs)


def cmd_show(args: argparse.Namespace) -> int:
    """The trace's summary line and the step microscope's tables; with --step and --token, one token's panel."""
    from .microscope import panel_text, tables_text

    trace = _load_trace(args.trace)
    if trace is None:
        return 2
    lang = args.lang
    _print_safe(summary_line(trace))
    if args.step is not None or args.token is not None:
        panel = panel_text(trace, args.step or 1, args.token or 1, lang)
        if panel is None:
            from .i18n import t

            print("error: " + t("microscope.no_position", lang, step=args.step or 1, i=args.token or 1,
                                last=len(trace.steps)), file=sys.stderr)
            return 2
        _print_safe(panel)
    _print_safe(tables_text(trace, lang))
    return 0


def _script(trace, path: Path, doing: str) -> str | None:
    """The script that reproduces a saved trace (its models are loaded to resolve the call), or None after a
    one-line error on stderr."""
    from transformers.utils import logging as hf_logging

    from .errors import user_message
    from .snippet import script_for_trace

    hf_logging.disable_progress_bar()
    hf_logging.set_verbosity_error()
    try:
        return script_for_trace(trace)
    except Exception as exc:  # one line for the user, whatever failed
        _print_safe(f"error: cannot {doing} for {path}: {user_message(exc)}", file=sys.stderr)
        return None


def cmd_code(args: argparse.Namespace) -> int:
    """Print the Python script that reproduces a saved trace (its models are loaded to resolve the call)."""
    trace = _load_trace(args.trace)
    if trace is None:
        return 2
    script = _script(trace, args.trace, "show the code")
    if script is None:
        return 2
    _print_safe(script, end="")
    return 0


def cmd_handout(args: argparse.Namespace) -> int:
    """Write a saved trace's printable handout (self-contained HTML) in --lang; print where it went."""
    from .errors import PlaygroundError
    from .handout import check, handout_html
    from .outside import for_terminal

    trace = _load_trace(args.trace)
    if trace is None:
        return 2
    try:
        check(trace)  # a trace the handout cannot describe: one line, before any model is loaded for --script
    except PlaygroundError as exc:
        print(for_terminal(f"error: {args.trace}: {exc}"), file=sys.stderr)
        return 2
    script = None
    if args.script:  # the reproducing script needs the run's models (loaded to resolve the call)
        script = _script(trace, args.trace, "make the script")
        if script is None:
            return 2
    out = args.out or args.trace.with_name(f"{args.trace.stem}-handout-{args.lang}.html")
    try:
        out.write_text(handout_html(trace, args.lang, script), encoding="utf-8")
    except OSError as exc:
        print(f"error: cannot write {out}: {exc.strerror}", file=sys.stderr)
        return 2
    print(out)
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m playground", description="Assisted-decoding playground")
    sub = parser.add_subparsers(dest="command", required=True)
    run_parser = sub.add_parser("run", help="run one generation and print it with a summary")
    add_run_arguments(run_parser)
    run_parser.set_defaults(func=cmd_run)
    show_parser = sub.add_parser("show", help="check a saved trace and print its summary line and the step "
                                              "microscope's tables (--step/--token: one token's distributions and rule)")
    show_parser.add_argument("trace", type=Path)
    show_parser.add_argument("--step", type=int, default=None, metavar="N", help="the step to open (1 = the first)")
    show_parser.add_argument("--token", type=int, default=None, metavar="I",
                             help="the position within the step: the I-th token it emitted, with the draft judged "
                                  "there (1 = the first; default 1)")
    show_parser.add_argument("--lang", default="en", choices=list(LANGUAGES), help="the language of the explanation")
    show_parser.set_defaults(func=cmd_show)
    code_parser = sub.add_parser("code", help="print the Python script that reproduces a saved trace")
    code_parser.add_argument("trace", type=Path)
    code_parser.set_defaults(func=cmd_code)
    handout_parser = sub.add_parser("handout", help="write a printable handout of a saved trace (self-contained HTML: "
                                                    "legend, the acceptance rule with its numbers, one annotated step, "
                                                    "the generate() call)")
    handout_parser.add_argument("trace", type=Path)
    handout_parser.add_argument("--lang", default="en", choices=list(LANGUAGES), help="the handout's language")
    handout_parser.add_argument("--out", type=Path, default=None, metavar="PATH",
                                help="where to write it (default: beside the trace, TRACE-handout-LANG.html)")
    handout_parser.add_argument("--script", action="store_true",
                                help="include the full reproducing script (loads the run's models), not just the call")
    handout_parser.set_defaults(func=cmd_handout)
    bench_parser = sub.add_parser("bench", help="benchmark drafting methods against baseline (CSV, JSON, HTML report)")
    add_bench_arguments(bench_parser)
    bench_parser.set_defaults(func=cmd_bench)
    tune_parser = sub.add_parser("tune", help="predict every draft setting's outcome from one run, recommend one "
                                              "(tune.json, tune.html)")
    add_tune_arguments(tune_parser)
    tune_parser.set_defaults(func=cmd_tune)
    convert_parser = sub.add_parser(
        "convert", help="convert bundled models to safetensors now (once per cache), e.g. in an image's build step")
    convert_parser.add_argument("models", nargs="*", default=[default("target")], metavar="MODEL",
                                help="bundled catalogue keys (default: the default target)")
    convert_parser.add_argument("--dtype", default=default("dtype"), choices=DTYPE_CHOICES,
                                help="also keep the weights in the dtype this picks (auto: bfloat16 where the CPU has it)")
    convert_parser.add_argument("--quiet", action="store_true", help="no progress and no summary")
    convert_parser.set_defaults(func=cmd_convert)
    return parser


def _command_line(command: str) -> str:
    """This process's `python -m playground COMMAND …` line (shell-quoted) for a report, or "" when it was not
    started from the command line (a test or a script calling `main`)."""
    if sys.argv[1:2] != [command]:
        return ""
    return f"python -m playground {command} " + " ".join(shlex.quote(a) for a in sys.argv[2:])


def add_bench_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--prompts", default="examples",
                        help="'spec-bench' for Spec-Bench's 480 questions (carried with the project), a Spec-Bench-style "
                             "JSONL (question_id, category, turns; the first turn is the prompt), or 'examples' for the "
                             "project's small example set (default)")
    parser.add_argument("--categories", default=None, help="comma-separated categories to keep, e.g. summarization,rag")
    parser.add_argument("--limit", type=int, default=None, help="at most this many prompts per category")
    parser.add_argument("--methods", default=DEFAULT_METHOD,
                        help="comma-separated methods with parameters, e.g. "
                             "prompt_lookup:prompt_lookup_num_tokens=5,speculative:num_assistant_tokens=5 "
                             "(baseline always runs; method:assistant=MODEL gives one method its own assistant)")
    parser.add_argument("--target", default=default("target"), help="catalogue key, Hub id or local directory")
    parser.add_argument("--assistant", default=None, help="assistant for the methods that need one")
    parser.add_argument("--max-new-tokens", type=int, default=MAX_NEW_TOKENS["bench"])
    parser.add_argument("--repeats", type=int, default=3, help="measured runs of each method per prompt (medians)")
    parser.add_argument("--dtype", default=default("dtype"), choices=DTYPE_CHOICES)
    chat = parser.add_mutually_exclusive_group()
    chat.add_argument("--chat", dest="chat", action="store_true", default=None, help="apply the chat template")
    chat.add_argument("--no-chat", dest="chat", action="store_false", help="raw prompts, no chat template")
    parser.add_argument("--threads", type=int, default=None,
                        help="torch CPU threads for the run (default: torch's choice). On cores shared with other "
                             "work, 1 thread gives far steadier timings than an oversubscribed OpenMP team")
    parser.add_argument("--no-overhead", dest="overhead", action="store_false",
                        help="skip the plain generate() runs that measure instrumentation overhead")
    parser.add_argument("--no-traces", dest="save_traces", action="store_false", help="do not write traces/")
    parser.add_argument("--out", default="bench-out", type=Path, help="directory for results.csv, results.json, report.html")
    parser.add_argument("--quiet", action="store_true", help="no progress on stderr")


def cmd_bench(args: argparse.Namespace) -> int:
    """Run the benchmark, write its files, print the summary table; 3 when a run failed or broke losslessness."""
    from .bench import BenchError, load_prompts, parse_methods, results_table, run_bench, write_outputs

    progress = None if args.quiet else (lambda msg: print(f"… {msg}", file=sys.stderr, flush=True))
    try:
        specs = parse_methods(args.methods, args.assistant)
        categories = args.categories.split(",") if args.categories else None
        prompts = load_prompts(None if args.prompts == "examples" else args.prompts, categories, args.limit)
        if args.repeats < 1:
            raise BenchError(f"--repeats must be at least 1; got {args.repeats}")
        if args.threads is not None:
            if args.threads < 1:
                raise BenchError(f"--threads must be at least 1; got {args.threads}")
            import torch

            torch.set_num_threads(args.threads)
        if progress:
            progress(f"{len(prompts)} prompts × {len(specs)} methods ({', '.join(s.label for s in specs)}) × "
                     f"{args.repeats} repeats" + (" (+ plain generate() runs for the overhead)" if args.overhead else ""))
        result = run_bench(prompts, specs, target=args.target, max_new_tokens=args.max_new_tokens, dtype=args.dtype,
                           chat=args.chat, repeats=args.repeats, measure_overhead=args.overhead, progress=progress,
                           command=_command_line("bench"))
        paths = write_outputs(result, args.out, save_traces=args.save_traces)
    except (KeyboardInterrupt, Exception) as exc:  # one line for the user, whatever failed
        return _failed(exc)
    print(results_table([a for a in result.aggregates if a.category == "all"] or result.aggregates))
    overhead = result.overhead()
    if overhead["median_ratio"] is not None:
        print(f"instrumentation overhead: median ratio instrumented/plain = {overhead['median_ratio']:.3f} "
              f"over {overhead['runs']} runs")
    print(f"wrote {paths['csv']}, {paths['json']}, {paths['html']}")
    for r in result.errors:
        print(f"error: {r.label} on {r.category}/{r.question_id}: {r.error or r.lossless_note}", file=sys.stderr)
    return 3 if result.errors else 0


def add_tune_arguments(parser: argparse.ArgumentParser) -> None:
    add_run_arguments(parser, trace_out=False)
    parser.add_argument("--prompts", default=None, help="'spec-bench' for Spec-Bench's questions (carried with the "
                        "project), a Spec-Bench-style JSONL (first turn of each), or 'examples' for the project's "
                        "example set; instead of --prompt / --prompt-file")
    parser.add_argument("--categories", default=None, help="comma-separated categories to keep from --prompts")
    parser.add_argument("--limit", type=int, default=None, help="at most this many prompts per category")
    parser.add_argument("--max-draft", type=int, default=8, help="largest draft length to predict (K)")
    parser.add_argument("--ngram-sizes", default="1,2,3,4", help="prompt lookup: max_matching_ngram_size values")
    parser.add_argument("--schedules", default="constant,heuristic", help="draft-length schedules to predict")
    parser.add_argument("--thresholds", default="0,0.2,0.4,0.6", help="assistant confidence thresholds to predict")
    parser.add_argument("--verify", action="store_true",
                        help="run the recommended setting and the default for real and report measured beside predicted")
    parser.add_argument("--out", type=Path, default=Path("tune-out"), help="directory for tune.json and tune.html")


def _numbers(text: str, kind: type, option: str) -> tuple:
    from .tune import TuneError

    try:
        return tuple(kind(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise TuneError(f"{option} takes comma-separated numbers; got {text!r}") from None


def cmd_tune(args: argparse.Namespace) -> int:
    from . import tune, tune_report
    from .bench import load_prompts

    progress = None if args.quiet else (lambda msg: print(f"… {msg}", file=sys.stderr, flush=True))
    try:
        if args.prompts is not None:
            if args.prompt is not None or args.prompt_file is not None:
                raise tune.TuneError("give either --prompts or --prompt / --prompt-file, not both")
            categories = args.categories.split(",") if args.categories else None
            prompts = [p.text for p in load_prompts(args.prompts, categories, args.limit)]
            run = request_from_args(argparse.Namespace(**{**vars(args), "prompt": prompts[0], "prompt_file": None}))
        else:
            run = request_from_args(args)  # --prompt, --prompt-file or a preset's prompt
            prompts = [run.prompt]
        request = tune.TuneRequest(
            run=run,
            max_draft=args.max_draft, ngram_sizes=_numbers(args.ngram_sizes, int, "--ngram-sizes"),
            schedules=tuple(x.strip() for x in args.schedules.split(",") if x.strip()),
            thresholds=_numbers(args.thresholds, float, "--thresholds"))
        result = tune.tune(request, prompts, progress=progress)
        if args.verify:
            tune.verify(result, progress=progress)
        result.meta["command"] = _command_line("tune") or "python -m playground tune "
        data = result.to_dict()
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "tune.json").write_text(tune.to_json(data), encoding="utf-8")
        (args.out / "tune.html").write_text(tune_report.render_report(data), encoding="utf-8")
    except (KeyboardInterrupt, Exception) as exc:  # one line for the user, whatever failed
        return _failed(exc)
    print(tune_report.verdict(data))
    for row in tune_report.table_rows(data, tune_report.best_rows(data, 5)):
        print("  " + " | ".join(row[:7]) + ("  measured: " + " | ".join(row[7:]) if row[7] not in ("–", "") else ""))
    print(f"wrote {args.out / 'tune.json'}, {args.out / 'tune.html'}")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    return int(args.func(args))


if __name__ == "__main__":
    sys.exit(main())
