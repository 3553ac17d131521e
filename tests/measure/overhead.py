"""The instrumented engine's own cost: its run time ÷ a plain generate() with the same arguments (a benchmark).

Usage (the figures need a quiet machine):

    python tests/measure/overhead.py [auto|float32|bfloat16]              # bundled Gemma, warm, one process
    python tests/measure/overhead.py bfloat16 --pairs 9                     # fewer warm pairs (a 5-minute quiet window)
    python tests/measure/overhead.py bfloat16 --fresh 5                     # ... and 5 alternating pairs of fresh processes
    python tests/measure/overhead.py float32 --tiny --fresh 5               # the tiny test models instead
    python tests/measure/overhead.py bfloat16 --fresh 5 --max-new-tokens 96  # the issue-25 setting
    python tests/measure/overhead.py bfloat16 --profile                     # where the cost goes (not wall-clock)
    python tests/measure/overhead.py bfloat16 --profile --live              # ... with the steps taken as the page takes them
    python tests/measure/overhead.py bfloat16 --faults 2 --max-new-tokens 96  # page faults in fresh processes (not wall-clock)
    python tests/measure/overhead.py bfloat16 --faults 2 --sample --live --methods early_exit  # sampling, steps built live
    python tests/measure/overhead.py bfloat16 --pairs 0 --fresh 7 --methods prompt_lookup --max-new-tokens 96  # fresh, 1 method
    python tests/measure/overhead.py --pool out1.txt out2.txt                # runs nothing: saved outputs' pairs pooled

Warm: per method, `--pairs` (15) interleaved rounds after a warm-up in one process (all in worker threads; round k
runs plain generate() and the instrumented kinds in the k-th of all their orders, so each kind takes every place); the median ratio of the instrumented run's time to plain generate()'s with the ratios'
inter-quartile range (a change smaller than the range is not decided by one run), a 95 % bootstrap interval of the
median and what it says of the issue's goal (met, missed, or not decided by so few pairs: on the tiny models a
48-token run lasts 0.07-0.2 s and two runs of the same call differ by up to 2x on a quiet machine), tokens/s, and
whether the outputs matched. With `--live`, a third run per pair iterates the steps as the page does (each step built as it comes,
in the consumer thread) instead of `LiveRun.run()` (steps built after generation). Fresh: each pair
is two new processes, alternating: the CLI (`python -m playground run --trace-out`, its generation time from the
trace) and a process that prepares the same request and times one plain generate() (its first, as the CLI's is).
Profile: per method, one plain and one instrumented run under cProfile (the generating thread's calls, counted
exactly, and its Python self time (the thread's own CPU time) outside torch's own functions, instrumented minus
plain, per step: the per-step Python overhead, inflated by the profiler alike in both; the consumer thread's calls and CPU time per step), and how
many vocabulary-wide torch calls each thread makes per step: evidence that does not depend on a quiet machine.
Faults: per method, fresh processes as in Fresh (the CLI's own `main`, and the plain child), each counting the
minor page faults of the whole process inside its first generate() call (memory touched for the first time costs
a fault, about 2 µs, that a warm process does not pay) and its voluntary context switches (threads that wait: an
OpenMP team that sleeps between ops instead of spinning shows as thousands): counts that need no quiet machine; per
thread, the generating thread's own with its OpenMP team's, and the threads any other thread started meanwhile (an
OpenMP team of the consumer's). With `--live` the instrumented child takes the steps as they come in a fresh thread
(the page's way) instead of the CLI's `run()`; with `--sample` every run samples (seed 0), and the set gains early
exit, plain and with ensemble verification (w = 0.7): drafts with logits, so refusals whose residual the consumer
computes. Goals (issue 25): ≤ 1.03 warm and ≤ 1.05 fresh for baseline and prompt lookup on the bundled Gemma; ≤ 1.10
on the tiny models.
"""

from __future__ import annotations

import argparse
import cProfile
import itertools
import json
import pstats
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

PROMPT = ("Here is a list of fruits: apple, banana, cherry, date, elderberry, fig, grape. "
          "Again, the list of fruits: apple,")
BUNDLED_CASES: list[tuple[str, str | None, dict[str, Any]]] = [("baseline", None, {}), ("prompt_lookup", None, {"prompt_lookup_num_tokens": 5})]
# With --sample: methods whose drafts come with logits (q), so a refusal makes the consumer compute the residual.
SAMPLING_CASES: list[tuple[str, str | None, dict[str, Any]]] = [("early_exit", None, {"assistant_early_exit": 12, "num_assistant_tokens": 3}),
                  ("early_exit", None, {"assistant_early_exit": 12, "num_assistant_tokens": 3,
                                        "assistant_ensemble_weight": 0.7})]


def tiny_models(root: Path) -> dict[str, str]:
    """The tests' tiny target and its noisy copy (same tokenizer), saved under `root`."""
    from tiny import build_tokenizer, save_tiny_llama

    tok = build_tokenizer()
    target = save_tiny_llama(root / "target", seed=0, tokenizer=tok)
    noisy = save_tiny_llama(root / "noisy", seed=1, tokenizer=tok, perturb_from=target, noise=0.3)
    return {"target": str(target), "noisy": str(noisy)}


def _quartiles(values: list[float]) -> tuple[float, float, float]:
    """(first quartile, median, third quartile)."""
    if len(values) < 2:
        return values[0], values[0], values[0]
    q1, q2, q3 = statistics.quantiles(values, n=4, method="inclusive")
    return q1, q2, q3


def _median_interval(values: list[float], resamples: int = 4000, seed: int = 0) -> tuple[float, float]:
    """A 95 % bootstrap interval of the median (the 2.5th and 97.5th percentiles of the medians of `resamples`
    resamples with replacement, seeded): how far the median of so few noisy pairs can be trusted."""
    import random

    draw = random.Random(seed)
    medians = sorted(statistics.median(draw.choices(values, k=len(values))) for _ in range(resamples))
    return medians[int(0.025 * resamples)], medians[int(0.975 * resamples) - 1]


def _verdict(low: float, high: float, goal: float) -> str:
    """Whether the goal is met, missed or not decided by these pairs (the median's interval against it)."""
    if high <= goal:
        return f"goal <= {goal:.2f}: met"
    if low > goal:
        return f"goal <= {goal:.2f}: missed"
    return f"goal <= {goal:.2f}: not decided by these pairs (more pairs narrow the interval)"


def _ratios_line(ratios: list[float], goal: float | None = None) -> str:
    q1, median, q3 = _quartiles(ratios)
    low, high = _median_interval(ratios)
    line = (f"median ratio {median:.3f} (IQR {q1:.3f}-{q3:.3f}, range {min(ratios):.3f}-{max(ratios):.3f}; "
            f"95 % interval of the median {low:.3f}-{high:.3f}")
    return line + (f"; {_verdict(low, high, goal)})" if goal is not None else ")")


# Issue 25's goals: instrumented / plain generate() on the bundled Gemma warm and in fresh processes, tiny models.
GOALS = {("bundled", "warm"): 1.03, ("bundled", "fresh"): 1.05, ("tiny", "warm"): 1.10, ("tiny", "fresh"): 1.10}


def _live(prepared: Any) -> Any:
    """A run whose steps are taken as they come (the page's way), not after generation (`LiveRun.run`)."""
    from playground.engine import LiveRun

    live = LiveRun(prepared)
    for _ in live:
        pass
    return live.trace


def warm(target: str, cases: list, dtype: str, new_tokens: int, chat: bool | None, pairs: int, live: bool,
         goal: float | None = None) -> None:
    from playground.engine import LiveRun, RunRequest, plain_generate, prepare

    for method, assistant, params in cases:
        prepared = prepare(RunRequest(prompt=PROMPT, target=target, method=method, assistant=assistant, params=params,
                                      max_new_tokens=new_tokens, dtype=dtype, chat=chat))
        LiveRun(prepared).run()
        _live(prepared)
        plain_generate(prepared)  # warm-up
        kinds = {"run": lambda: LiveRun(prepared).run(), **({"live": lambda: _live(prepared)} if live else {})}
        ratios: dict[str, list[float]] = {kind: [] for kind in kinds}
        same = True
        # Round k runs plain and the kinds in the k-th of all their orders, in turn: each takes every place, and
        # follows each other equally often (a fixed order would give one kind the place after another's run).
        orders = list(itertools.permutations(["plain", *kinds]))
        for k in range(pairs):
            traces = {}
            for kind in orders[k % len(orders)]:
                if kind == "plain":
                    ids, plain_s = plain_generate(prepared)
                else:
                    traces[kind] = kinds[kind]()
            for kind, trace in traces.items():
                same &= ids == trace.output_ids
                ratios[kind].append(trace.summary.elapsed_s / plain_s)
        s = traces["run"].summary
        for kind, values in ratios.items():
            print(f"warm {method} {traces[kind].env.get('dtype')} ({kind}): {_ratios_line(values, goal)} over {pairs} "
                  f"pairs {[round(r, 3) for r in values]}", flush=True)
        if live:  # the page's way against the CLI's, round by round: what taking the steps as they come adds
            per_round = [a / b for a, b in zip(ratios["live"], ratios["run"])]
            print(f"  live ÷ run: {_ratios_line(per_round)} over {pairs} rounds", flush=True)
        print(f"  {s.new_tokens} tokens in {s.elapsed_s:.2f} s = {s.tokens_per_s:.1f} tok/s, {s.tokens_per_step:.2f} "
              f"tokens/step; outputs equal: {same}", flush=True)


# torch calls that read a whole vocabulary row (or more) when given logits or probabilities.
VOCAB_WIDE = ("softmax", "log_softmax", "logsumexp", "topk", "sort", "amax", "argmax", "max", "multinomial", "isfinite")


def _calls(stats: pstats.Stats) -> dict[str, tuple[int, float]]:
    """(calls, self seconds) per function, keyed by a short readable name."""
    out: dict[str, tuple[int, float]] = {}
    for (file, line, name), (_, calls, self_s, _, _) in stats.stats.items():  # type: ignore[attr-defined]
        key = name if file == "~" else f"{Path(file).name}:{line}({name})"
        before = out.get(key, (0, 0.0))
        out[key] = (before[0] + calls, before[1] + self_s)
    return out


def _vocab_wide(calls: dict[str, tuple[int, float]], steps: int) -> str:
    found = {key: n for key, (n, _) in calls.items()
             if key.startswith("<") and "builtins" not in key and any(f"'{op}'" in key or f".{op}>" in key for op in VOCAB_WIDE)}
    return ", ".join(f"{key.split(chr(39))[1] if chr(39) in key else key} {n / steps:.1f}"
                     for key, n in sorted(found.items(), key=lambda item: -item[1])) or "none"


def _python_self_s(calls: dict[str, tuple[int, float]]) -> float:
    """Self seconds of everything but torch's own C functions and tensor methods (their time is the model's work,
    alike in both runs): the Python the loop runs around them, builtins included."""
    return sum(s for key, (_, s) in calls.items() if not (key.startswith("<") and "torch" in key))


def profile(target: str, cases: list, dtype: str, new_tokens: int, chat: bool | None, live: bool = False) -> None:
    """The instrumented run against plain generate() by counting, not timing: calls on the generating thread
    (cProfile, enabled inside generate() itself, whichever thread runs it), the consumer thread's calls and CPU.
    `live`: the instrumented run takes its steps as they come (the page's way), and the consumer's CPU is split at
    the last step's arrival (while generation runs, and after it: what a live run defers)."""
    from playground.engine import LiveRun, RunRequest, plain_generate, prepare

    for method, assistant, params in cases:
        prepared = prepare(RunRequest(prompt=PROMPT, target=target, method=method, assistant=assistant, params=params,
                                      max_new_tokens=new_tokens, dtype=dtype, chat=chat))
        LiveRun(prepared).run()
        plain_generate(prepared)
        model = prepared.target.model
        profiles: list[cProfile.Profile] = []

        def generate(*args, _inner=model.generate, **kwargs):
            profiler = cProfile.Profile(time.thread_time_ns, 1e-9)  # CPU time of this thread (waits do not count)
            profiles.append(profiler)
            profiler.enable()
            try:
                return _inner(*args, **kwargs)
            finally:
                profiler.disable()

        model.generate = generate
        try:
            plain_generate(prepared)
            consumer = cProfile.Profile()
            cpu = time.thread_time()
            consumer.enable()
            if live:
                run = LiveRun(prepared)
                for _ in run:
                    last_step_cpu = time.thread_time()
                trace = run.trace
            else:
                trace = LiveRun(prepared).run()
            consumer.disable()
            cpu, last_step_cpu = time.thread_time() - cpu, (last_step_cpu - cpu if live else None)  # type: ignore[assignment]  # None only where not live, and then not read
        finally:
            del model.generate
        steps = len(trace.steps)
        plain, instrumented = (_calls(pstats.Stats(p)) for p in profiles)
        n_plain, n_instr = sum(n for n, _ in plain.values()), sum(n for n, _ in instrumented.values())
        extra = sorted(((n - plain.get(key, (0, 0.0))[0], key) for key, (n, _) in instrumented.items()), reverse=True)
        py_plain, py_instr = _python_self_s(plain), _python_self_s(instrumented)
        print(f"profile {method} {trace.env.get('dtype')}: {steps} steps, {trace.summary.new_tokens} tokens", flush=True)
        print(f"  generating thread: {n_plain} calls plain, {n_instr} instrumented ({(n_instr - n_plain) / steps:+.1f} "
              f"per step); vocabulary-wide per step: plain {_vocab_wide(plain, steps)}; instrumented "
              f"{_vocab_wide(instrumented, steps)}")
        print(f"  generating thread's Python CPU self time outside torch (under cProfile): plain {py_plain / steps * 1000:.3f} "
              f"ms per step, instrumented {py_instr / steps * 1000:.3f}: {(py_instr - py_plain) / steps * 1000:+.3f} ms "
              f"per step, {(py_instr - py_plain) / trace.summary.new_tokens * 1000:+.3f} ms per token (noisy: the "
              f"thread's CPU time moves with the machine); added calls × plain's Python time per call: "
              f"{(n_instr - n_plain) / steps * py_plain / n_plain * 1e6:+.1f} µs per step")
        print("  most added calls: " + ", ".join(f"{key} {n / steps:+.1f}" for n, key in extra[:8] if n > 0))
        own = _calls(pstats.Stats(consumer))
        own.pop("<method 'acquire' of '_thread.lock' objects>", None)  # waiting for the next step
        busy = sorted(own.items(), key=lambda item: -item[1][1])
        split = (f" ({last_step_cpu / steps * 1000:.2f} until the last step came, "
                 f"{(cpu - last_step_cpu) / steps * 1000:.2f} after it)" if live else "")
        print(f"  consumer thread ({'live' if live else 'run()'}): {cpu / steps * 1000:.2f} ms CPU per step{split}; "
              f"vocabulary-wide per step: "
              f"{_vocab_wide(own, steps)}; most self time: "
              + ", ".join(f"{key} {s / steps * 1000:.2f} ms" for key, (_, s) in busy[:5]), flush=True)


def _cli_arguments(target: str, method: str, assistant: str | None, params: dict, dtype: str, max_new_tokens: int,
                   chat: bool | None, trace_out: Path, sample: bool = False, seed: int | None = None) -> list[str]:
    """`python -m playground`'s arguments for one quiet run that writes its trace."""
    command = ["run", "--target", target, "--method", method, "--prompt", PROMPT,
               "--max-new-tokens", str(max_new_tokens), "--dtype", dtype, "--quiet", "--trace-out", str(trace_out)]
    command += ["--assistant", assistant] if assistant else []
    command += (["--sample"] if sample else []) + (["--seed", str(seed)] if seed is not None else [])
    command += [arg for k, v in params.items() for arg in ("--set", f"{k}={v}")]
    return command + ([] if chat is None else ["--chat" if chat else "--no-chat"])


def _cli(target: str, method: str, assistant: str | None, params: dict, dtype: str, new_tokens: int,
         chat: bool | None, trace_out: Path) -> tuple[list[int], float]:
    command = [sys.executable, "-m", "playground", *_cli_arguments(target, method, assistant, params, dtype, new_tokens,
                                                                   chat, trace_out)]
    subprocess.run(command, cwd=ROOT, check=True, capture_output=True)
    trace = json.loads(trace_out.read_text(encoding="utf-8"))
    return trace["output_ids"], trace["summary"]["elapsed_s"]


def _plain(request: dict) -> tuple[list[int], float]:
    out = subprocess.run([sys.executable, str(Path(__file__).resolve()), "--plain-child", json.dumps(request)],
                         cwd=ROOT, check=True, capture_output=True, text=True)
    answer = json.loads(out.stdout.strip().splitlines()[-1])
    return answer["ids"], answer["seconds"]


def plain_child(request: dict) -> None:
    """In a fresh process: prepare the request as the CLI does and time its first plain generate()."""
    from playground.engine import RunRequest, plain_generate, prepare

    ids, seconds = plain_generate(prepare(RunRequest(prompt=PROMPT, **request)))
    print(json.dumps({"ids": ids, "seconds": seconds}))


GENERATING = "pg-generate"  # the generating thread's OS name (`engine.WORKER_OS_THREAD_NAME`), given to plain's too


def _threads() -> dict[str, tuple[str, int]]:
    """Each thread of this process: its OS name and its voluntary context switches so far."""
    import os

    out = {}
    for tid in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{tid}/status", encoding="utf-8") as status:
                fields = dict(line.split(":", 1) for line in status if ":" in line)
        except OSError:  # it ended meanwhile
            continue
        out[tid] = (fields["Name"].strip(), int(fields["voluntary_ctxt_switches"]))
    return out


def _faults_inside_generate() -> dict[str, Any]:
    """Count this process's minor page faults and voluntary context switches (a thread waiting: an OpenMP team that
    sleeps between ops, a lock) inside each generate() call from now on (into the returned dict); per thread, the
    generating thread's with its OpenMP team's (threads it starts inherit its name), and the names of the threads
    other threads started meanwhile (the consumer's OpenMP team, if it starts one)."""
    import resource

    from transformers.generation.utils import GenerationMixin

    from playground.engine.worker import _name_os_thread

    counted: dict[str, Any] = {}
    inner = GenerationMixin.generate

    def generate(self, *args, **kwargs):
        _name_os_thread(GENERATING)  # plain's worker too (LiveRun's has the name already)
        threads = _threads()
        before = resource.getrusage(resource.RUSAGE_SELF)
        try:
            return inner(self, *args, **kwargs)
        finally:
            after = resource.getrusage(resource.RUSAGE_SELF)
            now = _threads()
            counted["faults"] = after.ru_minflt - before.ru_minflt
            counted["waits"] = after.ru_nvcsw - before.ru_nvcsw
            counted["generating_waits"] = sum(n - threads.get(tid, (name, 0))[1] for tid, (name, n) in now.items()
                                              if name == GENERATING)
            counted["others_started"] = sorted(name for tid, (name, _) in now.items()
                                               if tid not in threads and name != GENERATING)

    GenerationMixin.generate = generate
    return counted


def _live_in_a_fresh_thread(request: dict) -> list[int]:
    """The page's way: the steps taken as they come, built in a fresh thread (a server's worker), named pg-consumer."""
    import threading

    from playground.engine import LiveRun, RunRequest, prepare
    from playground.engine.worker import _name_os_thread

    prepared = prepare(RunRequest(prompt=PROMPT, **request))
    box: dict[str, Any] = {}

    def consume() -> None:
        _name_os_thread("pg-consumer")
        live = LiveRun(prepared)
        for _ in live:
            pass
        box["ids"] = live.trace.output_ids

    consumer = threading.Thread(target=consume)
    consumer.start()
    consumer.join()
    return box["ids"]


def fault_child(which: str, request: dict) -> None:
    """In a fresh process: the CLI's run ("cli"), the steps taken as they come ("live") or the plain child's
    ("plain"), printing the minor page faults and context switches inside its generate() call."""
    from playground.models import gc_paused

    with gc_paused():  # the CLI imports torch and Transformers so (`cli.cmd_run`)
        counted = _faults_inside_generate()
    if which == "live":
        ids = _live_in_a_fresh_thread(request)
    elif which == "cli":
        from playground.cli import main as cli_main

        with tempfile.TemporaryDirectory() as scratch:
            out = Path(scratch) / "trace.json"
            cli_main(_cli_arguments(**request, trace_out=out))
            ids = json.loads(out.read_text(encoding="utf-8"))["output_ids"]
    else:
        from playground.engine import RunRequest, plain_generate, prepare

        ids, _ = plain_generate(prepare(RunRequest(prompt=PROMPT, **request)))
    print(json.dumps({"ids": ids, **counted}))


def faults(target: str, cases: list, dtype: str, new_tokens: int, chat: bool | None, pairs: int, sample: bool = False,
           live: bool = False) -> None:
    instrumented = "live" if live else "cli"
    for method, assistant, params in cases:
        request = {"target": target, "method": method, "assistant": assistant, "params": params,
                   "max_new_tokens": new_tokens, "dtype": dtype, "chat": chat}
        request.update({"sample": True, "seed": 0} if sample else {})
        got_all: dict[str, list[dict]] = {instrumented: [], "plain": []}
        same = True
        for k in range(pairs):
            got = {}
            for which in ((instrumented, "plain") if k % 2 == 0 else ("plain", instrumented)):
                out = subprocess.run([sys.executable, str(Path(__file__).resolve()), "--fault-child", which,
                                      json.dumps(request)], cwd=ROOT, check=True, capture_output=True, text=True)
                got[which] = json.loads(out.stdout.strip().splitlines()[-1])
                got_all[which].append(got[which])
            same &= got[instrumented]["ids"] == got["plain"]["ids"]

        def each(which: str, key: str) -> list:
            return [got[key] for got in got_all[which]]

        label = f"{method}{' ensemble' if 'assistant_ensemble_weight' in params else ''} {dtype}"
        label += f"{' sampling' if sample else ''}, {instrumented}"
        print(f"faults {label}: minor page faults inside the first generate() of a fresh process: {instrumented} "
              f"{each(instrumented, 'faults')}, plain {each('plain', 'faults')}; median {instrumented} - plain "
              f"{statistics.median(each(instrumented, 'faults')) - statistics.median(each('plain', 'faults')):+.0f}; "
              f"voluntary context switches: {instrumented} {each(instrumented, 'waits')}, plain {each('plain', 'waits')}; "
              f"of the generating thread and its team: {instrumented} {each(instrumented, 'generating_waits')}, plain "
              f"{each('plain', 'generating_waits')}; threads other threads started: {instrumented} "
              f"{each(instrumented, 'others_started')}, plain {each('plain', 'others_started')}; outputs equal: {same}",
              flush=True)


def fresh(target: str, cases: list, dtype: str, new_tokens: int, chat: bool | None, pairs: int,
          goal: float | None = None) -> None:
    with tempfile.TemporaryDirectory() as scratch:
        for method, assistant, params in cases:
            request = {"target": target, "method": method, "assistant": assistant, "params": params,
                       "max_new_tokens": new_tokens, "dtype": dtype, "chat": chat}
            ratios, same = [], True
            for k in range(pairs):
                order = (0, 1) if k % 2 == 0 else (1, 0)  # alternate which goes first
                got: dict[int, tuple[list[int], float]] = {}
                for which in order:
                    got[which] = (_cli(target, method, assistant, params, dtype, new_tokens, chat,
                                       Path(scratch) / "trace.json") if which == 0 else _plain(request))
                same &= got[0][0] == got[1][0]
                ratios.append(got[0][1] / got[1][1])
            print(f"fresh {method} {dtype}: {_ratios_line(ratios, goal)} over {pairs} pairs of processes "
                  f"{[round(r, 3) for r in ratios]}; outputs equal: {same}",
                  flush=True)


def pool(paths: list[str]) -> None:
    """Pool the per-pair ratios printed by earlier runs of this script (saved outputs), per setting: the median
    and its interval over every pair (only meaningful where the engine's code did not change between them)."""
    import ast
    import re

    pooled: dict[str, list[float]] = {}
    pattern = re.compile(r"(warm|fresh) (\w+) (\w+)(?: \((\w+)\))?: .*?over (\d+) (?:pairs|pairs of processes) (\[[^\]]*\])")
    for path in paths:
        for line in Path(path).read_text(encoding="utf-8").splitlines():
            found = pattern.match(line)
            if found:
                key = " ".join(part for part in found.groups()[:4] if part)
                pooled.setdefault(key, []).extend(ast.literal_eval(found.group(6)))
    for key, values in pooled.items():
        print(f"pooled {key}: {_ratios_line(values)} over {len(values)} pairs")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("dtype", nargs="?", default="auto")
    parser.add_argument("--tiny", action="store_true", help="the tiny test models instead of the bundled Gemma")
    parser.add_argument("--pairs", type=int, default=15, help="interleaved warm pairs per method (default 15; 0: none)")
    parser.add_argument("--pool", nargs="+", metavar="OUTPUT", help="run nothing: pool the per-pair ratios of saved "
                        "outputs of this script, per setting")
    parser.add_argument("--live", action="store_true", help="also time runs whose steps are taken as they come (with "
                        "--faults: count such a run, in a fresh consumer thread, instead of the CLI's; with "
                        "--profile: profile such a run's consumer instead of run()'s)")
    parser.add_argument("--fresh", type=int, default=0, help="pairs of fresh processes (CLI, plain generate())")
    parser.add_argument("--max-new-tokens", type=int, default=48)
    parser.add_argument("--methods", default=None, help="comma-separated methods to keep (default: all of the set)")
    parser.add_argument("--profile", action="store_true", help="count calls (cProfile) instead of timing runs")
    parser.add_argument("--faults", type=int, default=0, help="pairs of fresh processes counting page faults instead")
    parser.add_argument("--sample", action="store_true",
                        help="with --faults: sample (seed 0), and add early exit plain and with ensemble verification")
    parser.add_argument("--plain-child", help=argparse.SUPPRESS)
    parser.add_argument("--fault-child", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.pool:
        pool(args.pool)
        return
    if args.plain_child:
        plain_child(json.loads(args.plain_child))
        return
    if args.fault_child:
        fault_child(args.fault_child[0], json.loads(args.fault_child[1]))
        return
    started = time.perf_counter()
    with tempfile.TemporaryDirectory() as root:
        if args.tiny:
            models = tiny_models(Path(root))
            target, chat = models["target"], False
            cases = BUNDLED_CASES + [("speculative", models["noisy"], {"num_assistant_tokens": 4})]
        else:
            target, chat, cases = "bundled/gemma-3-270m", None, BUNDLED_CASES + (SAMPLING_CASES if args.sample else [])
        if args.methods:
            keep = args.methods.split(",")
            unknown = set(keep) - {method for method, _, _ in cases}
            if unknown:
                parser.error(f"--methods: not in this set: {', '.join(sorted(unknown))}")
            cases = [case for name in keep for case in cases if case[0] == name]  # in the order given
        if args.profile:
            profile(target, cases, args.dtype, args.max_new_tokens, chat, args.live)
            return
        if args.faults:
            faults(target, cases, args.dtype, args.max_new_tokens, chat, args.faults, args.sample, args.live)
            return
        if args.pairs > 0:
            warm(target, cases, args.dtype, args.max_new_tokens, chat, args.pairs, args.live,
                 GOALS[("tiny" if args.tiny else "bundled", "warm")])
        if args.fresh:
            fresh(target, cases, args.dtype, args.max_new_tokens, chat, args.fresh,
                  GOALS[("tiny" if args.tiny else "bundled", "fresh")])
    print(f"{time.perf_counter() - started:.0f} s in all")


if __name__ == "__main__":
    main()
