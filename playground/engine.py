"""The instrumented decoding loop: Transformers' own `generate()`, observed step by step.

We do not re-implement assisted decoding. `generate()` runs in a worker thread; for drafting
methods we wrap the target's `_get_candidate_generator` for the run and patch the two methods
of the generator instance it builds (a proxy object would break the loop, which reads its
attributes and checks its class). `get_candidates` shows what was drafted (and q);
`update_candidate_strategy` shows what the target verified and emitted (and p). For baseline a
streamer sees each token and a forward pre-hook on the target marks where each step begins.

Timing: the worker only takes timestamps (after synchronising the model's device on CUDA, so
asynchronous kernels are charged to the phase that launched them) and pushes raw tensors; the
caller's thread turns them into token lists, probabilities (softmax over the vocabulary) and text.
The stamps partition `generate()`: setup (until the first step begins), then per step draft,
verify and other (see `trace.Step`), so setup + Σ phases = elapsed.
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import logging
import os
import platform
import queue
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator

import numpy
import torch
import transformers
from transformers import LogitsProcessorList, StoppingCriteria, StoppingCriteriaList
from transformers.generation.streamers import BaseStreamer

from . import draw_tap
from .errors import PlaygroundError, localized_message
from .i18n import DEFAULT_LANGUAGE, Message, t
from .methods import EmptyDraft, Method, MethodError, ModelFacts, get_method, prompt_lookup_match
from .models import (
    CATALOGUE, HUB_ID_RE, STORE, LoadedModel, ModelStore, Precision, default_device,
    SPEED_MODEL, ensure_measured, resolve_precision, same_vocabulary,
)
from .pace import Pace
from .request import RunRequest, method_for
from .settings import get_settings
from .trace import (
    LOOKUP_CONTEXT_CHARS, Position, Ranked, Step, StepTotals, Trace, TraceFormatError, classify_step,
)

logger = logging.getLogger(__name__)
# Sampling draws from torch's global generator: one seeded sampling run at a time.
_RNG_LOCK = threading.Lock()

# The assistant adaptations PreparedRun.assistant_adaptations may name, and why.
ID_ORDERED_VOCABULARY = "id_ordered_vocabulary"  # the assistant tokenizer lists its vocabulary in id order
PRUNED_BEFORE_SEEDING = "pruned_before_seeding"  # universal sampling's LM-head pruning done before the seed
ASSISTANT_ADAPTATIONS = {
    ID_ORDERED_VOCABULARY: "transformers 5.24 prunes a universal assistant's LM head in get_vocab() order but "
                           "scatters its draft logits in id order: listed in id order, q lands on the right tokens",
    PRUNED_BEFORE_SEEDING: "pruning builds a new nn.Linear whose initialisation draws from torch's global "
                           "generator: done before seeding, it does not move the run's random stream",
}


class RunError(PlaygroundError):
    """The request cannot run as given; the message is for the user."""


@dataclass
class PreparedRun:
    """Everything resolved and loaded; `generate_kwargs` is exactly what `generate()` receives."""

    request: RunRequest
    method: Method
    params: dict[str, Any]
    target: LoadedModel
    assistant: LoadedModel | None
    input_ids: torch.Tensor
    rendered_prompt: str
    chat: bool
    generate_kwargs: dict[str, Any]
    draft_config: dict[str, Any]  # set on `draft_config_model.generation_config` for the run
    draft_config_model: Any
    eos_ids: frozenset[int]
    lossy: bool
    precision: Precision  # the request's dtype choice resolved once (dtype, device, why): every view reads it
    # What the engine did to the assistant beyond loading it, by name (see ASSISTANT_ADAPTATIONS): a script
    # that reproduces the run must do the same.
    assistant_adaptations: tuple[str, ...] = ()

    def models(self) -> list[LoadedModel]:
        return [m for m in (self.target, self.assistant) if m is not None]

    def with_max_new_tokens(self, n: int) -> "PreparedRun":
        """The same run cut to `n` new tokens (a warm-up), without loading or validating anything again."""
        return dataclasses.replace(self, request=self.request.but(max_new_tokens=int(n)),
                                   generate_kwargs={**self.generate_kwargs, "max_new_tokens": int(n)})


SEED_RANGE = (-(2**63), 2**64 - 1)  # what torch.manual_seed accepts
MIN_TEMPERATURE = 0.01  # logits / temperature must stay finite (float32 and bfloat16 top out near 3e38)
MAX_TOP_K = 2**31 - 1


def validate_request(req: RunRequest) -> None:
    settings = get_settings()
    if not isinstance(req.prompt, str) or not req.prompt.strip():
        raise RunError.keyed("error.prompt_empty")
    if not 1 <= int(req.max_new_tokens) <= settings.max_new_tokens:
        raise RunError.keyed("error.max_new_tokens", limit=settings.max_new_tokens, got=req.max_new_tokens)
    if not SEED_RANGE[0] <= req.seed <= SEED_RANGE[1]:
        raise RunError.keyed("error.seed", got=req.seed)
    if req.sample:
        if not req.temperature > 0:
            raise RunError.keyed("error.temperature_zero", got=req.temperature)
        if req.temperature < MIN_TEMPERATURE:
            raise RunError.keyed("error.temperature_min", min=MIN_TEMPERATURE, got=req.temperature)
        if not 0 < req.top_p <= 1:
            raise RunError.keyed("error.top_p", got=req.top_p)
        if not 0 <= req.top_k <= MAX_TOP_K:
            raise RunError.keyed("error.top_k", limit=MAX_TOP_K, got=req.top_k)
    if req.dtype == "float16" and default_device() == "cpu":
        raise RunError.keyed("error.float16_cpu")


def _chat_default(spec: str, loaded: LoadedModel) -> bool:
    entry = CATALOGUE.get(spec)
    if entry is not None:
        return bool(entry.chat) and loaded.has_chat_template
    return loaded.has_chat_template


def chat_messages(prompt: str, system: str | None = None) -> list[dict[str, str]]:
    """The chat the template renders: an optional system message, then the prompt as the user's turn."""
    return ([{"role": "system", "content": system}] if system else []) + [{"role": "user", "content": prompt}]


def _check_chat_options(system: Any, template_kwargs: Any) -> None:
    if system is not None and not isinstance(system, str):
        raise RunError.keyed("error.system_not_text", got=repr(system))
    if not isinstance(template_kwargs, dict) or not all(
            isinstance(k, str) and k.isidentifier() and (v is None or isinstance(v, (str, bool, int, float)))
            for k, v in template_kwargs.items()):
        raise RunError.keyed("error.template_variables", example='{"enable_thinking": false}', got=repr(template_kwargs))


def render_prompt(loaded: LoadedModel, prompt: str, chat: bool, system: str | None = None,
                  template_kwargs: dict[str, Any] | None = None) -> tuple[str, torch.Tensor]:
    """Apply the chat template when asked (with an optional system message and template variables such as
    enable_thinking); return the text the model sees and its ids."""
    tok = loaded.tokenizer
    if chat:
        if not loaded.has_chat_template:
            raise RunError.keyed("error.no_chat_template", model=loaded.name)
        text = tok.apply_chat_template(chat_messages(prompt, system), tokenize=False, add_generation_prompt=True,
                                       **(template_kwargs or {}))
        ids = tok(text, add_special_tokens=False, return_tensors="pt").input_ids
    elif system or template_kwargs:
        raise RunError.keyed("error.needs_chat_template")
    else:
        text = prompt
        ids = tok(text, return_tensors="pt").input_ids
    return text, ids


def _mtp_weights_on_disk(model: Any) -> bool | None:
    """Whether a local checkpoint's safetensors hold the MTP layers its config declares (None: cannot tell)."""
    path = getattr(model.config, "_name_or_path", "") or ""
    if not os.path.isdir(path):
        return None
    from safetensors import safe_open
    from transformers.modeling_layers import MtpModel

    try:
        pattern = MtpModel.get_mtp_weights_regex(model)  # the keys Transformers will look for
    except ValueError:  # the model class registers no MTP key pattern at all
        return False
    for file in sorted(Path(path).glob("*.safetensors")):
        with safe_open(str(file), framework="pt") as handle:
            if any(pattern.search(key) for key in handle.keys()):
                return True
    return False


def model_facts(target: LoadedModel, assistant: LoadedModel | None, sample: bool) -> ModelFacts:
    text_config = target.model.config.get_text_config()
    name_or_path = getattr(target.model.config, "_name_or_path", "") or ""
    on_disk = bool(name_or_path) and (os.path.isdir(name_or_path) or bool(HUB_ID_RE.match(name_or_path)))
    has_mtp = bool(getattr(text_config, "num_mtp_layers", None))
    return ModelFacts(
        target_class=type(target.model).__name__,
        target_layers=target.num_layers,
        target_has_mtp=has_mtp,
        target_on_disk=on_disk,
        assistant_class=type(assistant.model).__name__ if assistant else None,
        same_vocabulary=same_vocabulary(target.tokenizer, assistant.tokenizer) if assistant else None,
        sample=sample,
        target_vocab_size=getattr(text_config, "vocab_size", None),
        assistant_vocab_size=getattr(assistant.model.config.get_text_config(), "vocab_size", None) if assistant else None,
        target_mtp_weights=_mtp_weights_on_disk(target.model) if has_mtp and on_disk else None,
    )


def _dedicated_assistant(store: ModelStore, req: RunRequest, precision: Precision, target: LoadedModel,
                         progress: Callable[[str], None] | None) -> LoadedModel:
    """The assistant for universal decoding with sampling: a dedicated copy, one per target tokenizer object.

    Transformers prunes this assistant's LM head (and remaps its embeddings) in place to the vocabulary it
    shares with the target, caching that mapping per tokenizer pair; a second target, or the same target
    reloaded (a new tokenizer object), would prune it again and crash. The copy holds on to the tokenizer it
    was made for, so the id in its store key cannot be reused, and the store drops it with its target. Its
    vocabulary is listed in id order: transformers 5.24 prunes the head in get_vocab() order but scatters the
    draft logits in id order, so with a hash-ordered vocabulary q lands on the wrong tokens and sampling is
    biased (the chi-square tests in tests/test_method_sampling.py show both).
    """
    purpose = f"universal-sampling:{req.target}:{id(target.tokenizer)}"
    # Copying the base model and pruning the copy (it draws from torch's generator) take one turn among the runs
    # that take turns on them (`one_turn`): they wait for one step of those runs, not for their end.
    assistant = store.get_copy(req.assistant, precision, purpose=purpose, progress=progress, bound_to=target,
                               holding=lambda lock: one_turn([lock]))
    assistant.universal_target_tokenizer = target.tokenizer  # type: ignore[attr-defined]
    tok = assistant.tokenizer
    if getattr(tok, "_playground_id_ordered", False) and assistant.on_release:
        return assistant  # adapted already: no need to wait for the runs using it (they hold its lock by turns)
    with one_turn([assistant.lock, _RNG_LOCK]):  # a sampling run in another thread must not see its random stream move
        if not getattr(tok, "_playground_id_ordered", False):
            unordered = tok.get_vocab
            tok.get_vocab = lambda: dict(sorted(unordered().items(), key=lambda item: item[1]))
            tok._playground_id_ordered = True
        if not assistant.on_release:  # a new copy: prune it, and forget Transformers' translator when it goes
            _build_universal_translator(target, assistant)
            target_tok = target.tokenizer
            assistant.on_release.append(lambda: forget_universal_translator(target_tok, tok))
    return assistant


def _build_universal_translator(target: LoadedModel, assistant: LoadedModel) -> None:
    """Prune the copy now, as generate() would on its first call: pruning builds a new nn.Linear, whose random
    initialisation draws from torch's global generator, so done inside the first seeded run it would make that
    run differ from every later run with the same seed (and from the script that reproduces it)."""
    from transformers.generation.candidate_generator import AssistantVocabTranslatorCache

    AssistantVocabTranslatorCache.get_translator(  # the caller holds `_RNG_LOCK` (by a turn: `one_turn`)
        target.tokenizer, assistant.tokenizer, target.model.config.get_text_config().vocab_size,
        assistant_model=assistant.model, assistant_prune_lm_head=True,
    )


def forget_universal_translator(target_tokenizer: Any, assistant_tokenizer: Any) -> None:
    """Drop Transformers' cached translator for this tokenizer pair. Its cache is keyed weakly on the tokenizers,
    but the translator it stores refers to both of them (and to the pruned copy's embeddings), so without this
    the entry, the tokenizers and the embedding weights live as long as the process."""
    from transformers.generation.candidate_generator import AssistantVocabTranslatorCache

    pairs = AssistantVocabTranslatorCache._cache.get(target_tokenizer)
    if pairs is not None:
        pairs.pop(assistant_tokenizer, None)
        if not len(pairs):
            AssistantVocabTranslatorCache._cache.pop(target_tokenizer, None)


def _eos_ids(loaded: LoadedModel) -> frozenset[int]:
    """The EOS set `generate()` stops and crops drafts on: the generation config's, not the tokenizer's."""
    eos = loaded.model.generation_config.eos_token_id
    if eos is None:
        return frozenset()
    return frozenset([eos] if isinstance(eos, int) else list(eos))


def prepare(
    req: RunRequest,
    store: ModelStore = STORE,
    progress: Callable[[str], None] | None = None,
) -> PreparedRun:
    """Validate the request, load the models and build the exact `generate()` arguments."""
    validate_request(req)
    _check_chat_options(req.system, req.chat_template_kwargs)
    method = get_method(req.method)
    params = method_for(req.method, req.target).resolve_params(req.params)  # names and values checked before loading
    if method.needs_assistant and not req.assistant:
        raise RunError.keyed("error.needs_assistant", method=method.title_message())
    if not method.needs_assistant and req.assistant:
        req = req.but(assistant=None)
    if req.dtype == "auto" and SPEED_MODEL in (req.target, req.assistant):
        ensure_measured(progress)  # once per machine: `auto` on a CPU with native bfloat16 decides by it
    precision = resolve_precision(req.dtype)
    target = store.get(req.target, precision, progress)
    assistant: LoadedModel | None = None
    adaptations: tuple[str, ...] = ()
    if method.needs_assistant:
        # A method that adapts its assistant in place (universal decoding with sampling prunes and remaps it)
        # gets a dedicated copy.
        if method.needs_dedicated_assistant(req.sample):
            assistant = _dedicated_assistant(store, req, precision, target, progress)
            adaptations = (ID_ORDERED_VOCABULARY, PRUNED_BEFORE_SEEDING)
        else:
            assistant = store.get(req.assistant, precision, progress)
    # Defaults again with the loaded target's layers: a default past its last layer is clamped; a value the
    # request gives is checked against them by `validate`.
    params = method_for(req.method, req.target, target.num_layers).resolve_params(req.params)
    method.validate(model_facts(target, assistant, req.sample), params)

    chat = _chat_default(req.target, target) if req.chat is None else bool(req.chat)
    rendered, input_ids = render_prompt(target, req.prompt, chat, req.system, req.chat_template_kwargs)
    settings = get_settings()
    n_prompt = input_ids.shape[1]
    if n_prompt > settings.max_prompt_tokens:
        raise RunError.keyed("error.prompt_tokens", n=n_prompt, limit=settings.max_prompt_tokens)
    context = getattr(target.model.config.get_text_config(), "max_position_embeddings", None)
    if context and n_prompt + req.max_new_tokens > context:
        raise RunError.keyed("error.context", n=n_prompt, new=req.max_new_tokens, context=context)

    gen_args, draft_config = method.split_params(params)
    tok = target.tokenizer
    kwargs: dict[str, Any] = {
        "input_ids": input_ids.to(target.device),
        "attention_mask": torch.ones_like(input_ids).to(target.device),
        "max_new_tokens": int(req.max_new_tokens),
        "do_sample": bool(req.sample),
        "pad_token_id": tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id,
        **gen_args,
    }
    if req.sample:
        kwargs.update(temperature=float(req.temperature), top_p=float(req.top_p), top_k=int(req.top_k))
    if assistant is not None:  # the arguments the registry names (`Method.assistant_kwargs`, shown in the lecture)
        passed = {"assistant_model": assistant.model, "tokenizer": target.tokenizer,
                  "assistant_tokenizer": assistant.tokenizer}
        kwargs.update({name: passed[name] for name in method.assistant_kwargs()})
    owner = target.model if method.draft_config_on == "target" or assistant is None else assistant.model
    return PreparedRun(
        request=req, method=method, params=params, target=target, assistant=assistant, input_ids=input_ids,
        rendered_prompt=rendered, chat=chat, generate_kwargs=kwargs, draft_config=draft_config,
        draft_config_model=owner, eos_ids=_eos_ids(target), lossy=method.is_lossy(params, req.sample),
        precision=precision, assistant_adaptations=adaptations,
    )


class JobStopped(BaseException):
    """The job a run belongs to was stopped (its visitor left): raised where the job's work goes on between
    generations. Not an `Exception`, so work that keeps going past a failed run (Compare) does not swallow it."""


_JOB = threading.local()  # `.stop`: the stop event of the job this thread works for (see `stopped_by`)


@contextlib.contextmanager
def stopped_by(event: threading.Event) -> Iterator[None]:
    """Every run started in this thread inside the block also ends when `event` is set (its visitor left): a long
    job (Compare, Tune, the check against plain `generate()`) stops at its current generation's next step, and
    each later run or pass refuses to start (`JobStopped`)."""
    previous = getattr(_JOB, "stop", None)
    _JOB.stop = event
    try:
        yield
    finally:
        _JOB.stop = previous


def check_stopped() -> None:
    """Raise `JobStopped` if this thread's job was stopped (long work calls it between its passes)."""
    event = getattr(_JOB, "stop", None)
    if event is not None and event.is_set():
        raise JobStopped("the job was stopped: its visitor left")


_TURNS = threading.Condition()  # guards `_foreground_runs`; a long job's run waits on it for its turn
_foreground_runs = 0  # a visitor's own runs (not a long job's) waiting for their models or running


class GaveWay(BaseException):
    """A long job's pass stopped at a step because a visitor's own run asked for the models: the pass is redone
    from its beginning at the job's next turn (`redone_after_giving_way`). Not an `Exception`, as `JobStopped`."""


def visitor_waiting() -> bool:
    """Whether this thread works for a long job (`stopped_by`) while a visitor's own run waits for (or holds) its
    turn: the job's work should give way at its next step."""
    return getattr(_JOB, "stop", None) is not None and _foreground_runs > 0


def give_way() -> None:
    """Raise `GaveWay` in a long job's pass when a visitor's own run waits (Tune's passes call it per forward)."""
    if visitor_waiting():
        raise GaveWay("a visitor's run goes first")


def redone_after_giving_way(work: Callable[[], Any]) -> Any:
    """`work()` (a pass that takes its turn with `turn()`), redone from its beginning each time it gave way: its next
    turn comes once the visitor's run is done. Its result is the one undisturbed pass's."""
    while True:
        try:
            return work()
        except GaveWay:
            logger.info("a long job's pass gave way to a visitor's run; it starts again at its next turn")


@contextlib.contextmanager
def _turn(job: threading.Event | None) -> Iterator[None]:
    """A run's turn at the models. A visitor's own run (no `job`: the page's Generate, an MCP generate, whatever
    stops it) counts itself while it waits and runs; a long job's run (Compare, Tune, the plain check, an MCP compare
    or bench: `job` is that job's stop event) first waits until no such run waits or runs. So a
    visitor's short generation waits at most for the one generation a long job has already begun, never for the
    rest of the job; a job whose visitor left stops waiting (`JobStopped`)."""
    global _foreground_runs
    if job is None:
        with _TURNS:
            _foreground_runs += 1
        try:
            yield
        finally:
            with _TURNS:
                _foreground_runs -= 1
                _TURNS.notify_all()
        return
    with _TURNS:
        while _foreground_runs:
            if job.is_set():
                raise JobStopped("the job was stopped: its visitor left")
            _TURNS.wait(0.5)
    yield


def turn() -> contextlib.AbstractContextManager[None]:
    """This thread's turn at the models (`_turn`), for work that holds model locks outside `exclusive` (Tune's
    drafter pass)."""
    return _turn(getattr(_JOB, "stop", None))


@contextlib.contextmanager
def exclusive(prepared: PreparedRun, job: threading.Event | None = None,
              turns: "_Turns | None" = None) -> Iterator[None]:
    """Hold the models and the state generation mutates for the duration of one run (after `_turn`: `job` is the
    stop event of the long job the run belongs to; None for a visitor's own run, whose own stop event `turns` carries).

    One generation per loaded model at a time (early exit lowers the target's layer count, the
    heuristic schedule writes back the draft length); the draft-length settings live on the
    generation_config Transformers reads them from, set for the run and restored after. With `turns` the run
    instead takes turns per step with the other such runs (`_Turns`: its settings set per turn).
    """
    locks = sorted({id(m.lock): m.lock for m in prepared.models()}.items())
    with contextlib.ExitStack() as stack:
        stack.enter_context(_turn(job))
        if turns is not None:
            stack.enter_context(turns.holding())
            yield
            return
        for _, lock in locks:
            stack.enter_context(lock)
        if prepared.request.sample:
            stack.enter_context(_RNG_LOCK)
        config = prepared.draft_config_model.generation_config
        saved = {k: getattr(config, k, None) for k in prepared.draft_config}
        for key, value in prepared.draft_config.items():
            setattr(config, key, value)
        try:
            if prepared.request.sample:
                torch.manual_seed(int(prepared.request.seed))
            yield
        finally:
            for key, value in saved.items():
                setattr(config, key, value)


# --- runs that take turns per step -------------------------------------------------------------
# A visitor's own run (the page's Generate, an MCP `generate`) streams to its visitor, so it is never ended and redone
# as a long job's run is: such runs take turns at the models one decoding step at a time instead. A run joins the
# holders of its models' locks (and of `_RNG_LOCK` when it samples): the first to need a lock acquires it, the last
# to finish releases it, so nothing else (a long job's run, Tune's passes, the store's copying and eviction) touches
# those models meanwhile. Among the holders one baton passes, first come first served: a run steps only while it holds
# the baton, and at the boundary between two of its steps (its stopping criteria, where every method has put the
# model back in its normal state: early exit restores the layer count right after drafting) it hands the baton on
# when another run waits and queues again behind it. What a run changes on shared objects is set at each of its turns
# and undone at the turn's end (`_Turns`): the draft settings on the generation_config Transformers reads them from,
# the hooks and wrappers the instrumentation puts on the model, and torch's random state (saved and restored, so a
# seeded run draws exactly the numbers it draws alone).

_BATON = threading.Condition()  # guards everything below
_baton_owner: "_Turns | None" = None
_baton_queue: "collections.deque[_Turns]" = collections.deque()
_shared_locks: dict[int, list[Any]] = {}  # id(lock) -> [lock, runs sharing it]
_acquiring: set[int] = set()  # locks a run is acquiring for the holders now


class _StoppedWaiting(BaseException):
    """The run was stopped (its visitor left) before its first turn came: it ends without a step."""


def _join_holders(locks: list[Any]) -> None:
    """Share `locks` (in the order given) with the runs that take turns; acquire each one nobody of them holds."""
    for lock in locks:
        key = id(lock)
        with _BATON:
            while key in _acquiring:
                _BATON.wait()
            if key in _shared_locks:
                _shared_locks[key][1] += 1
                continue
            _acquiring.add(key)
        try:
            lock.acquire()  # may wait for a long job's run or a Tune pass (they give way or end)
        finally:
            with _BATON:
                _acquiring.discard(key)
                _BATON.notify_all()
        with _BATON:
            _shared_locks[key] = [lock, 1]


def _leave_holders(locks: list[Any]) -> None:
    """Stop sharing `locks`; the last run to leave one releases it."""
    with _BATON:
        for lock in reversed(locks):
            entry = _shared_locks.get(id(lock))
            if entry is None:
                continue
            entry[1] -= 1
            if entry[1] == 0:
                del _shared_locks[id(lock)]
                lock.release()
        _BATON.notify_all()


def _pass_baton_locked(turns: "_Turns") -> None:
    """Hand the baton from `turns` to the first run waiting (caller holds `_BATON`)."""
    global _baton_owner
    if _baton_owner is turns:
        _baton_owner = _baton_queue.popleft() if _baton_queue else None
        _BATON.notify_all()


def _await_baton_locked(turns: "_Turns", first: bool) -> None:
    """Queue for the baton and wait until it comes (caller holds `_BATON`). A run stopped while waiting for its
    first turn leaves the queue (`_StoppedWaiting`); one stopped between its steps goes to the queue's front: it
    still takes one turn, in which `generate()` returns and the run undoes what it set."""
    global _baton_owner
    if _baton_owner is None and not _baton_queue:
        _baton_owner = turns
        return
    _baton_queue.append(turns)
    moved = False
    while _baton_owner is not turns:
        if turns.stopped() and turns in _baton_queue:
            if first:
                _baton_queue.remove(turns)
                _BATON.notify_all()
                raise _StoppedWaiting("stopped before its first turn")
            if not moved:
                _baton_queue.remove(turns)
                _baton_queue.appendleft(turns)
                moved = True
        _BATON.wait(0.25)


def others_waiting() -> bool:
    """Whether a run waits for the baton (read without the lock: a hint, checked again under it)."""
    return bool(_baton_queue)


class _Turns:
    """One run's turns at the models: what it sets on shared objects for each turn and undoes after, and the time
    it spent waiting for other runs' steps (`waited_s`, never part of its timed phases)."""

    def __init__(self, prepared: PreparedRun, cancel: threading.Event,
                 per_turn: Callable[[], list[contextlib.AbstractContextManager[Any]]] = list,
                 job: threading.Event | None = None):
        self.prepared = prepared
        self.cancel = cancel
        self.job = job  # the MCP call the run belongs to, if any: its agent leaving stops the run too
        self.per_turn = per_turn  # the run's hooks on the model, entered at each turn and left at its end
        self.waited_s = 0.0
        self.paused_s = 0.0  # of which the run stood paused at its visitor's pace (`pause`), reported apart
        self.turns = 0
        self._rng: tuple[torch.Tensor, torch.Tensor | None] | None = None
        self._saved_config: dict[str, Any] = {}
        self._stack: contextlib.ExitStack | None = None
        self._cuda = torch.device(prepared.target.device).type == "cuda"

    def stopped(self) -> bool:
        return self.cancel.is_set() or (self.job is not None and self.job.is_set())

    def locks(self) -> list[Any]:
        locks = [lock for _, lock in sorted({id(m.lock): m.lock for m in self.prepared.models()}.items())]
        return locks + ([_RNG_LOCK] if self.prepared.request.sample else [])

    def _begin_turn(self) -> None:
        prepared = self.prepared
        config = prepared.draft_config_model.generation_config
        self._saved_config = {k: getattr(config, k, None) for k in prepared.draft_config}
        for key, value in prepared.draft_config.items():
            setattr(config, key, value)
        if prepared.request.sample:
            if self._rng is None:
                torch.manual_seed(int(prepared.request.seed))
            else:
                torch.set_rng_state(self._rng[0])
                if self._rng[1] is not None:
                    torch.cuda.set_rng_state(self._rng[1], prepared.target.device)
        self.turns += 1
        stack = contextlib.ExitStack()
        try:
            for manager in self.per_turn():
                stack.enter_context(manager)
        except BaseException:
            stack.close()
            raise
        self._stack = stack

    def _end_turn(self) -> None:
        prepared = self.prepared
        try:
            if self._stack is not None:
                self._stack.close()
                self._stack = None
        finally:
            if prepared.request.sample:
                cuda = torch.cuda.get_rng_state(prepared.target.device) if self._cuda else None
                self._rng = (torch.get_rng_state(), cuda)
            config = prepared.draft_config_model.generation_config
            for key, value in self._saved_config.items():
                setattr(config, key, value)
            self._saved_config = {}

    @contextlib.contextmanager
    def holding(self) -> Iterator[None]:
        """The run's models, shared with the runs that take turns, and its first turn; its last turn ends after."""
        locks = self.locks()
        began = time.perf_counter()
        _join_holders(locks)
        try:
            with _BATON:
                _await_baton_locked(self, first=True)
            self.waited_s += time.perf_counter() - began
            try:
                self._begin_turn()
                yield
            finally:
                self._end_turn()  # also after a failed start of the turn: what it set is undone
                with _BATON:
                    _pass_baton_locked(self)
        finally:
            _leave_holders(locks)

    def pause(self, wait: Callable[[], bool]) -> tuple[float, float, bool]:
        """At a boundary between two of the run's steps: end this turn and hand the baton on (other runs step and
        nothing of this run is on the models), `wait()` for the presenter's pace (`pace.Pace.wait`: no core is held),
        then queue for the next turn. Returns (seconds paused, seconds then queued again for the baton, whether the wait
        ended before its limit); the queueing counts as waiting for others (`waited_s`), the pause apart (`paused_s`)."""
        began = time.perf_counter()
        self._end_turn()
        with _BATON:
            _pass_baton_locked(self)
        try:
            ended = wait()
        finally:
            paused = time.perf_counter() - began
            with _BATON:
                _await_baton_locked(self, first=False)
            self._begin_turn()
        queued = time.perf_counter() - began - paused
        self.paused_s += paused
        self.waited_s += queued
        return paused, queued, ended

    def between_steps(self) -> float:
        """At a boundary between two of the run's steps: when another run waits, end this turn, let the runs queued
        before it take one step each, and begin the next turn. Returns the seconds it waited (0: nobody waited)."""
        if not _baton_queue:
            return 0.0
        began = time.perf_counter()
        self._end_turn()
        with _BATON:
            _pass_baton_locked(self)
            _await_baton_locked(self, first=False)
        self._begin_turn()
        waited = time.perf_counter() - began
        self.waited_s += waited
        return waited


class _OneTurn:
    """Work that needs models for one turn and no steps (copying a model, pruning a universal copy): it queues for the
    baton as a run does and never stops early."""

    def stopped(self) -> bool:
        return False


@contextlib.contextmanager
def one_turn(locks: list[Any]) -> Iterator[None]:
    """Hold `locks` (model locks, then `_RNG_LOCK` if any) for one turn: shared with the runs that take turns, the
    work waits for the baton (one step of each run queued before it), not for those runs to end; a lock nobody of them
    holds is acquired (a long job's run holding it goes on to its end or gives way). Meanwhile every such run is
    between two of its steps, its hooks and settings off the models and its random state saved (`_Turns`)."""
    work = _OneTurn()
    _join_holders(locks)
    try:
        with _BATON:
            _await_baton_locked(work, first=True)  # type: ignore[arg-type]
        try:
            yield
        finally:
            with _BATON:
                _pass_baton_locked(work)  # type: ignore[arg-type]
    finally:
        _leave_holders(locks)


def in_worker_thread(fn: Callable[[], Any], name: str) -> Any:
    """Run `fn` in a fresh thread, as `LiveRun` runs `generate()`, and return its result (or raise its error).

    On oversubscribed cores the main thread's OpenMP team was measured several times slower than a worker
    thread's, so every timed run happens in a worker thread.
    """
    box: dict[str, Any] = {}
    job = getattr(_JOB, "stop", None)  # the worker works for the caller's job (its runs stop with it)

    def work() -> None:
        _JOB.stop = job
        try:
            box["result"] = fn()
        except BaseException as exc:  # re-raised in the caller's thread
            box["error"] = exc

    thread = threading.Thread(target=work, name=name, daemon=True)
    thread.start()
    thread.join()
    if "error" in box:
        raise box["error"]
    return box["result"]


def plain_generate(prepared: PreparedRun) -> tuple[list[int], float]:
    """The same `generate()` call with no instrumentation: the reference for output and overhead (in a
    worker thread, as `LiveRun` runs it, so an overhead figure compares the instrumentation alone)."""

    job: threading.Event | None = getattr(_JOB, "stop", None)  # the caller's long job, if it is one
    kwargs = dict(prepared.generate_kwargs)
    stop = _Stop(threading.Event(), None)  # it takes the caller's job
    if job is not None:  # its visitor leaving ends it at the next step (one Event look per step: no cost to see)
        stop.gives_way = True  # and a visitor's own run waiting for the models makes it start again after that run
        kwargs["stopping_criteria"] = StoppingCriteriaList([stop])

    def attempt() -> tuple[list[int], float]:
        stop.gave_way = False
        with exclusive(prepared, job), torch.inference_mode():
            start = time.perf_counter()
            out = prepared.target.model.generate(**kwargs)
            if stop.gave_way:
                raise GaveWay("a visitor's run goes first")
            return out[0, prepared.input_ids.shape[1]:].tolist(), time.perf_counter() - start

    result = in_worker_thread(lambda: redone_after_giving_way(attempt), "playground-plain-generate")
    if job is not None and job.is_set():
        raise JobStopped("the job was stopped: its visitor left")
    return result


# --- raw records pushed by the worker ------------------------------------------------------

@dataclass
class _Raw:
    """One step as the worker saw it: tensors, not lists (the consumer converts them, outside the timing)."""

    drafted: torch.Tensor | None  # 1-D ids (None: nothing drafted)
    emitted: torch.Tensor  # 1-D ids appended this step
    total_len: int  # sequence length after the step
    draft_ms: float
    verify_ms: float
    q_logits: torch.Tensor | None  # draft logits, one row per drafted token
    p_logits: torch.Tensor | None  # the target's processed logits, rows aligned with the drafts
    draws: torch.Tensor | None = None  # speculative sampling's random draws r, one per drafted token (`draw_tap`)
    # What `_digest` makes of the logits: the drafted tokens' q and p, the microscope's top-k lists without texts
    # (by the consumer, or by the worker when the consumer fell far behind; see _Recorder).
    q: list[float] | None = None
    p: list[float] | None = None
    dists: list[Position] | None = None
    digested: bool = False
    spans: list[_Span] = dataclasses.field(default_factory=list)  # its logits' copies in a `_HeldLogits` buffer
    before: "_Other | _Setup | None" = None  # the phase closed when this step began (handed over with it)

    def logits_bytes(self) -> int:
        """The memory its logits hold (what a digest lets go): a copy's own stretch, or all of a tensor it keeps."""
        copies = {id(span.view) for span in self.spans}
        return sum(t.numel() * t.element_size() if id(t) in copies else t.untyped_storage().nbytes()
                   for t in (self.q_logits, self.p_logits) if t is not None)

    def release(self) -> None:
        """Let go of its logits (digested, or never to be read): their stretches of a buffer can be taken again."""
        self.q_logits = self.p_logits = None
        for span in self.spans:
            span.owner.release(span)
        self.spans = []


@dataclass
class _Other:
    """The `other_ms` of the step pushed last, known only when the next step begins or the loop ends."""

    ms: float


@dataclass
class _Setup:
    ms: float


# The consumer's vocabulary-wide work runs in its own thread alone. An ATen op over more than GRAIN_SIZE (32,768)
# elements starts an OpenMP team of the calling thread, which on a machine whose cores generation keeps busy fights
# generation's own team: measured on two cores (1 Dec), an amax over one 262,144-entry row took 0.02 ms of CPU alone
# and 19 ms of wall time (3.5 ms of CPU) with a team, a softmax over 6 rows 1.6 ms and 40 ms. So a softmax takes one
# row at a time (one row's softmax is never split across threads) and the chunk maxima by numpy. Counted in a fresh
# thread (2 Dec), sampling's own work started a team too: the residual max(0, p − q) (its subtraction, clamp, sum and
# division), ensemble verification's mixture, the whole-row sort of a flat row, and the float32 copy of a drafter's
# bfloat16 logits (the MTP drafter's); on the CPU these are numpy's now (`_mixture`, `_residual`, `_sorted_top`) and
# the copy goes in pieces of GRAIN_SIZE (`_float_rows`). Only the residual's sum changes order (numpy's pairwise sum).
GRAIN_SIZE = 32_768  # at::internal::GRAIN_SIZE: a CPU op over more elements than this may split across threads


def _float_rows(logits: torch.Tensor, rows: int) -> torch.Tensor:
    """The first `rows` rows of logits as float32: no copy when they are float32 already (Transformers' scores), else
    on the CPU converted GRAIN_SIZE entries at a time (the conversion is exact: the same values as `.float()`)."""
    logits = logits[:rows]
    if logits.dtype == torch.float32 or logits.device.type != "cpu":
        return logits.float()
    converted = torch.empty(logits.shape, dtype=torch.float32)
    for row in range(logits.shape[0]):
        for start in range(0, logits.shape[1], GRAIN_SIZE):
            converted[row, start:start + GRAIN_SIZE].copy_(logits[row, start:start + GRAIN_SIZE])
    return converted


def _softmax(logits: torch.Tensor | None, rows: int) -> torch.Tensor | None:
    """The probabilities of the first `rows` rows of logits (float32; None where there are none), one row at a time
    (see _softmax's note above). One softmax per step and distribution: every figure of the step (the drafted token's p and q,
    the top-k lists) is read from it."""
    if logits is None or rows <= 0:
        return None
    logits = _float_rows(logits, rows)
    probs = torch.empty_like(logits)
    for row in range(probs.shape[0]):
        torch.softmax(logits[row], dim=-1, out=probs[row])
    return probs


def _probs_of(probs: torch.Tensor | None, ids: list[int]) -> list[float] | None:
    """Probability of each given id under each row of probs (rows aligned with ids; NaN, from overflowed scores,
    read as 0)."""
    if probs is None or not ids:
        return None
    picked = probs[: len(ids)].gather(1, torch.tensor(ids, device=probs.device).unsqueeze(1)).squeeze(1)
    return [min(1.0, max(0.0, x)) if x == x else 0.0 for x in picked.tolist()]


# Top-k of a vocabulary-wide row without torch.topk, which on the CPU copies the row into (value, index) pairs and
# sorts them partially: about 0.5 ms per row of Gemma's 262,144 entries on one core (1 Dec), half of a whole softmax.
# Instead each row's chunks of TOP_K_CHUNK entries get their maximum (one vectorised pass); the k-th largest chunk
# maximum is a floor that at least k entries reach, so every entry of the top k reaches it and lies in a chunk whose
# maximum does; the entries of those few chunks that reach the floor (a few dozen) are sorted in Python, ties to the
# lower id. About 0.1 ms per row. Rows of at most SMALL_ROW entries (or k beyond their chunk count), and rows so flat
# that more than MAX_CANDIDATES entries reach the floor, are sorted whole.
TOP_K_CHUNK = 512
SMALL_ROW = 16 * TOP_K_CHUNK
MAX_CANDIDATES = 4096
_SMALLEST_POSITIVE = float(torch.nextafter(torch.zeros(()), torch.ones(())))  # p > 0 ⇔ p ≥ this


def _candidates(row: torch.Tensor, k: int) -> tuple[list[float], list[int]]:
    """The entries of a probability row that reach its floor (see above), as (probabilities, ids), ids ascending:
    every entry of the row's top k is among them. Computed in this thread alone (see the note above _softmax): by
    numpy on the CPU, whose reductions, partitions and fancy indexing never start threads (torch's topk, indexing
    and nonzero do, from a few thousand entries on), else by torch (a GPU has no OpenMP team to compete with)."""
    width = row.shape[0]
    whole = width - width % TOP_K_CHUNK
    if row.device.type == "cpu":
        values = row.numpy()
        maxima = values[:whole].reshape(-1, TOP_K_CHUNK).max(axis=-1)
        if whole < width:
            maxima = numpy.append(maxima, values[whole:].max())
        floor = max(float(numpy.partition(maxima, len(maxima) - k)[len(maxima) - k]), _SMALLEST_POSITIVE)
        ids = (numpy.flatnonzero(maxima >= floor)[:, None] * TOP_K_CHUNK + numpy.arange(TOP_K_CHUNK)).ravel()
        ids = ids[ids < width]
        hit = numpy.flatnonzero(values[ids] >= floor)
        return values[ids[hit]].tolist(), ids[hit].tolist()
    maxima = row[:whole].view(-1, TOP_K_CHUNK).amax(dim=-1)
    if whole < width:
        maxima = torch.cat([maxima, row[whole:].amax(dim=0, keepdim=True)])
    floor = max(float(maxima.topk(k).values[-1]), _SMALLEST_POSITIVE)
    ids = ((maxima >= floor).nonzero().squeeze(1).unsqueeze(1) * TOP_K_CHUNK
           + torch.arange(TOP_K_CHUNK, device=row.device)).reshape(-1)
    ids = ids[ids < width]
    hit = ids[row[ids] >= floor]
    return row[hit].tolist(), hit.tolist()


def _ranked(values: list[float], ids: list[int]) -> list[Ranked]:
    """A top-k list from probabilities and ids in rank order: probabilities clamped to [0, 1] (float32 rounding can
    put one a hair outside), tokens of probability 0 (removed by a warper) left out, the first always kept."""
    ranked = [Ranked(int(i), min(1.0, max(0.0, v))) for v, i in zip(values, ids)]
    return [r for n, r in enumerate(ranked) if n == 0 or r.prob > 0]


def _top_row(row: torch.Tensor, k: int) -> list[Ranked]:
    """The k most probable tokens of a probability row, most probable first, ties to the lower id (as argmax, and so
    greedy decoding, picks), zeros left out (`_ranked`). Texts are filled in by the consumer."""
    width = row.shape[0]
    k = min(k, width)
    if width > SMALL_ROW and k <= width // TOP_K_CHUNK:
        values, ids = _candidates(row, k)  # NaN (overflowed scores) reaches no floor: none
        if len(ids) <= MAX_CANDIDATES:
            entries = sorted(zip((-v for v in values), ids))[:k]
            if not entries:  # no entry is a positive number (NaN scores): the row's argmax stands alone
                first = int(row.argmax())
                entries = [(-float(row[first]), first)]
            return _ranked([-v for v, _ in entries], [i for _, i in entries])
    return _ranked(*_sorted_top(row, k))


def _sorted_top(row: torch.Tensor, k: int) -> tuple[list[float], list[int]]:
    """The first k of the whole row sorted as `row.sort(descending=True, stable=True)` sorts it (NaN first, then the
    largest, ties to the lower id), as (values, ids). On the CPU by numpy: torch's sort copies the row first, and that
    copy starts an OpenMP team (see the note above _softmax)."""
    if row.device.type == "cpu":
        values = row.numpy()
        order = numpy.lexsort((-values, ~numpy.isnan(values)))[:k]  # last key first: NaN, then descending values
        return values[order].tolist(), order.tolist()
    values, ids = row.sort(descending=True, stable=True)
    return values[:k].tolist(), ids[:k].tolist()


def _mixture(p: torch.Tensor, q: torch.Tensor, weight: float) -> torch.Tensor:
    """Ensemble verification's v = w·p + (1−w)·q over rows of probabilities. On the CPU by numpy (see the note above
    _softmax), with the same float32 steps as torch's (w and 1 − w rounded to float32, two products, one sum): the
    same bits."""
    if p.device.type == "cpu":
        return torch.from_numpy(numpy.float32(weight) * p.numpy() + numpy.float32(1 - weight) * q.numpy())
    return weight * p + (1 - weight) * q


def _residual(p: torch.Tensor, q: torch.Tensor) -> tuple[torch.Tensor, float]:
    """max(0, p − q) over one row and its sum. On the CPU by numpy (see the note above _softmax): the same row to the
    last bit; its float32 sum is numpy's pairwise one, whose order differs from torch's (which itself changes with
    the number of threads), so the total can differ from torch's in its last bits."""
    if p.device.type == "cpu":
        residual = numpy.subtract(p.numpy(), q.numpy())
        numpy.maximum(residual, numpy.float32(0), out=residual)
        return torch.from_numpy(residual), float(residual.sum())
    residual = (p - q).clamp(min=0)
    return residual, float(residual.sum())


def _normalised(row: torch.Tensor, total: float) -> torch.Tensor:
    """row / total, each entry divided by the total rounded to float32 (as torch divides a float32 tensor by a Python
    float). On the CPU by numpy (see the note above _softmax)."""
    if row.device.type == "cpu":
        return torch.from_numpy(row.numpy() / numpy.float32(total))
    return row / total


def _top_rows(probs: torch.Tensor, k: int) -> list[list[Ranked]]:
    """`_top_row` of each row of `probs` (2-D), one row at a time (see the note above _softmax)."""
    return [_top_row(probs[row], k) for row in range(probs.shape[0])]


def _refused_at(drafted: list[int], emitted: list[int]) -> int | None:
    """The position whose draft the target may have refused: the first where the emitted token differs, or the last
    emitted one when every emitted token equals its draft (ensemble verification can resample the refused id itself;
    when the end of generation cut the step there, the consumer drops what was computed for it)."""
    for i, (d, e) in enumerate(zip(drafted, emitted)):
        if d != e:
            return i
    return len(emitted) - 1 if emitted and len(emitted) <= len(drafted) else None


def _step_dists(drafted: list[int], emitted: list[int], p: torch.Tensor | None, q: torch.Tensor | None, k: int,
                sample: bool, ensemble_weight: float | None) -> list[Position] | None:
    """The step microscope's records of one step: per emitted token, the top-k of the target's row that decided it
    (p: softmax of the very scores Transformers decided with, after its logits processors), of the drafter's row (q:
    softmax of the candidate logits Transformers received, warped as `Method.q_source` says), of ensemble verification's
    mixture v = w·p + (1−w)·q, and at the refused position under sampling with q the residual max(0, p − q)
    normalised the correction was drawn from (Transformers' `_speculative_sampling`; ensemble: the same, since
    max(0, v − q) = w·max(0, p − q), or p itself where the residual is numerically zero). `p`, `q`: the step's
    probability rows (`_softmax`). Only k-sized lists leave this function."""
    if k <= 0 or p is None:
        return None
    rows = len(emitted)
    p = p[:rows]
    q = q[: min(rows, len(drafted))] if q is not None and drafted else None
    if q is not None and q.shape[-1] != p.shape[-1]:
        q = None  # not comparable token for token (Transformers could not compare them either)
    refused = _refused_at(drafted, emitted) if sample and q is not None else None
    judged = min(rows, len(drafted))
    p_top, p_emitted = _top_rows(p, k), _probs_of(p, emitted)
    p_drafted = _probs_of(p, drafted[:judged]) or []
    q_top, q_drafted = [], []
    if q is not None:
        q_top, q_drafted = _top_rows(q, k), _probs_of(q, drafted[: q.shape[0]]) or []
    if q is not None and ensemble_weight is not None:
        v = _mixture(p[: q.shape[0]], q, ensemble_weight)
        v_top, v_drafted = _top_rows(v, k), _probs_of(v, drafted[: q.shape[0]]) or []
    positions = []
    for i in range(rows):
        position = Position(p=p_top[i], p_emitted=p_emitted[i])
        if i < judged:
            token = drafted[i]
            position.p_drafted = p_drafted[i]
            if q is not None and i < q.shape[0]:
                position.q, position.q_drafted = q_top[i], q_drafted[i]
                if ensemble_weight is not None:
                    position.v, position.v_drafted = v_top[i], v_drafted[i]
                if i == refused:
                    residual, total = _residual(p[i], q[i])
                    if ensemble_weight is not None and total <= torch.finfo(residual.dtype).tiny:
                        residual, total = p[i], 1.0
                    if total > 0:
                        residual = _normalised(residual, total)
                        position.residual = _top_row(residual, k)
                        position.residual_emitted = _probs_of(residual.unsqueeze(0), [emitted[i]])[0]
        positions.append(position)
    return positions


def _digest(raw: "_Raw", k: int, sample: bool, ensemble_weight: float | None) -> None:
    """Turn a step's logits into what the trace keeps (the drafted tokens' q and p, the microscope's top-k lists)
    and let go of the logits."""
    drafted = raw.drafted.tolist() if raw.drafted is not None else []
    emitted = raw.emitted.tolist()
    p = _softmax(raw.p_logits, max(len(drafted), len(emitted) if k > 0 else 0))
    q = _softmax(raw.q_logits, len(drafted))
    raw.q, raw.p = _probs_of(q, drafted), _probs_of(p, drafted)
    raw.dists = _step_dists(drafted, emitted, p, q, k, sample, ensemble_weight)
    raw.release()
    raw.digested = True


def _device_sync(model: Any) -> Callable[[], None] | None:
    """A function that waits for the model's device to finish queued work (None on CPU: nothing to wait for)."""
    device = getattr(model, "device", torch.device("cpu"))
    if isinstance(device, torch.device) and device.type == "cuda":
        return lambda: torch.cuda.synchronize(device)
    return None


class _ScoreWatch:
    """Watches the target's scores as its forwards produce them (a forward hook that changes nothing).

    NaN, +inf, or a row without one finite score means the target's arithmetic overflowed (float16 on a model
    trained in bfloat16 is the usual cause): every token from there on is meaningless, typically padding. One
    reduction per forward (a row's maximum is NaN, +inf or -inf exactly when the row is bad) on the forward's own
    logits; the flag stays on the model's device (no synchronisation per forward); `_Stop` reads it once a step.
    A hook, not a logits processor: any processor at all switches the assisted loop onto its per-row processing
    of every verified position, a cost plain `generate()` does not pay. The drafter's own forwards (the target's
    first layers in early exit, or the target drafting for itself) are not the target's scores and are skipped.
    """

    def __init__(self) -> None:
        self.drafting = False  # set by the recorder around the drafter's turn
        self._bad: torch.Tensor | None = None

    def observe(self, module: Any, args: Any, output: Any) -> None:
        logits = getattr(output, "logits", None)
        if self.drafting or logits is None:
            return
        bad = ~torch.isfinite(logits.amax(dim=-1)).all()
        self._bad = bad if self._bad is None else self._bad | bad

    @contextlib.contextmanager
    def watching(self, model: Any) -> Iterator[None]:
        """Watch `model`'s forwards for the length of one run (the hook is removed after)."""
        handle = model.register_forward_hook(self.observe)
        try:
            yield
        finally:
            handle.remove()

    def tripped(self) -> bool:
        return self._bad is not None and bool(self._bad)


def non_finite_message(dtype: torch.dtype, tokens: int) -> Message:
    """Why a run whose target's scores overflowed was ended, and what to do about it (English as a str)."""
    name = str(dtype).replace("torch.", "")
    advice = Message.keyed("error.non_finite.float16" if dtype == torch.float16 else "error.non_finite.broken",
                           dtype=name)
    return Message.keyed("error.non_finite", n=tokens, advice=advice)


class _Stop(StoppingCriteria):
    """Ends generation after the current step when asked to, when its job was stopped, when the run's time is up,
    or when the target's scores overflowed."""

    def __init__(self, cancel: threading.Event, deadline: float | None, watch: _ScoreWatch | None = None):
        self.cancel = cancel
        self.job: threading.Event | None = getattr(_JOB, "stop", None)  # the job of the thread making the run
        self.deadline = deadline
        self.watch = watch
        self.timed_out = False
        self.gives_way = False  # a long job's run that is redone whole when it gives way (`LiveRun.run`)
        self.gave_way = False  # it did, at the step just ended: a visitor's own run waits for the models
        # A run that takes turns per step (`_Turns`): at each boundary where another waits it lets that one step first;
        # `on_wait` hears the seconds waited; no turn is passed on after the last step (`_last`).
        self.turns: _Turns | None = None
        self.on_wait: Callable[[float], None] = lambda seconds: None
        self.before_pause: Callable[[torch.Tensor], None] = lambda input_ids: None  # the step reaches its viewer first
        # A visitor's run at a pace (`pace.Pace`): after each step but the last it waits as the pace asks, outside its
        # turn (`_Turns.pause`); each pause is bounded by `pause_limit_s` (the run's time limit), else it times out.
        self.pace: Pace | None = None
        self.pause_limit_s: float | None = None
        self.max_length: int | None = None
        self.eos_ids: frozenset[int] = frozenset()

    def _last(self, input_ids: torch.LongTensor) -> bool:
        """Whether the step just ended is the run's last (its length reached, or EOS)."""
        return ((self.max_length is not None and input_ids.shape[1] >= self.max_length)
                or (bool(self.eos_ids) and int(input_ids[0, -1]) in self.eos_ids))

    def __call__(self, input_ids: torch.LongTensor, scores: Any, **kwargs: Any) -> torch.BoolTensor:
        if self.deadline is not None and time.perf_counter() > self.deadline:
            self.timed_out = True
        if self.job is not None and self.job.is_set():
            self.cancel.set()
        if self.gives_way and _foreground_runs > 0:
            self.gave_way = True
        stop = (self.cancel.is_set() or self.timed_out or self.gave_way
                or (self.watch is not None and self.watch.tripped()))
        if not stop and self.pace is not None and self.turns is not None and self.pace.holds() \
                and not self._last(input_ids):
            stop = self._pause(input_ids)
        if not stop and self.turns is not None and others_waiting() and not self._last(input_ids):
            waited = self.turns.between_steps()  # the runs waiting take their step now
            if waited:
                self.on_wait(waited)
                if self.deadline is not None:  # the run's time limit bounds its own work, not its waits
                    self.deadline += waited
                if self.job is not None and self.job.is_set():
                    self.cancel.set()
                stop = self.cancel.is_set()
        return torch.full((input_ids.shape[0],), stop, dtype=torch.bool, device=input_ids.device)

    def _pause(self, input_ids: torch.Tensor) -> bool:
        """Wait at the pace between two steps (the run's visitor or Stop ends the wait); whether to stop now."""
        assert self.pace is not None and self.turns is not None
        pace = self.pace

        def stopped() -> bool:
            return self.cancel.is_set() or (self.job is not None and self.job.is_set())

        self.before_pause(input_ids)
        paused, queued, in_time = self.turns.pause(lambda: pace.wait(stopped, self.pause_limit_s))
        pace.resumed()
        self.on_wait(paused + queued)  # in no phase and not in the elapsed time
        if self.deadline is not None:  # the run's time limit bounds its own work, not its pauses
            self.deadline += paused + queued
        if not in_time:
            self.timed_out = True
        if self.job is not None and self.job.is_set():
            self.cancel.set()
        return self.cancel.is_set() or self.timed_out


# Raw records waiting for the consumer hold their logits (a few MB a step for a 262k vocabulary). Past this
# many queued items (about half as many steps) the worker turns logits into probabilities itself, in the
# step's `other` phase, so a consumer that falls far behind cannot make memory grow with the run.
MAX_PENDING_LOGITS = 64
# A run keeps its steps' logits until generation has ended, up to this many bytes: a run nobody watches
# (`LiveRun.run`, `LiveRun._items`) and a run shown as it comes, whose steps get their figures then
# (`LiveRun._figures_later`). Past three quarters of it (96 MiB: the page's default 64-token run of a 262k
# vocabulary holds 64 MiB, a 96-token baseline run 96 MiB) the oldest are digested while generation runs, so memory
# does not grow with the run and the next batch finds room in the buffer (`_HeldLogits`, of this size).
HELD_LOGITS_BYTES = 128 * 2**20
# A run nobody watches hands its records over in batches of an eighth of HELD_LOGITS_BYTES of logits (and one when
# the attempt ends), not one by one: each hand-off wakes the consumer, whose thread then takes the interpreter lock
# from the generating one (counted, 2 Dec, tiny models in a fresh process: 234-268 voluntary context switches of the
# generating thread in a 48-token baseline run, against 3 for plain generate()).
HELD_BATCHES = 8


def _held_batch_bytes() -> int:
    return HELD_LOGITS_BYTES // HELD_BATCHES


def _held_digest_above() -> int:
    """Past this many bytes of held logits the consumer digests the oldest (room for the next batch in the buffer)."""
    return HELD_LOGITS_BYTES - 2 * _held_batch_bytes()


@dataclass
class _Span:
    """A stretch of a `_HeldLogits` buffer: [start, end) in floats, and the copy of one step's logits that it holds."""

    start: int
    end: int
    view: torch.Tensor
    owner: "_HeldLogits"
    freed: bool = False


class _HeldLogits:
    """Memory, written once before `generate()` starts, that a run nobody watches copies its steps' logits into.

    Holding Transformers' own score tensors instead keeps their memory from being reused, so each step's new scores
    land on pages the process never touched: in a fresh process every held byte costs a page fault inside the timed
    generation (counted on two cores, 2 Dec: a CLI run of prompt lookup on the bundled Gemma, bfloat16, 96 new
    tokens, had 42,000-45,000 minor faults inside generate() against 20,000-21,000 for plain generate(); about 2 µs
    each). A copy into pages faulted before the clock starts costs a memory copy (6 MB: about 0.2 ms) instead. A ring:
    the worker takes stretches in order, the consumer frees each when it digests that step; where no stretch is
    free, the step keeps Transformers' tensor as before. One buffer outlives its run (`_take_held`), so a
    process pays for the pages once."""

    def __init__(self, floats: int):
        # Every page written now, outside the clock, by numpy: a torch fill this large would start an OpenMP team in
        # the calling thread, and with more OpenMP threads than cores libgomp's idle threads sleep after a short spin
        # instead of waiting for the next parallel region, so generation's own team then sleeps and wakes around every
        # op (counted, 2 Dec: 2,700-4,000 voluntary context switches per generating thread in a 96-token prompt-lookup
        # run, against 0-50 without; the fresh CLI run took 1.2-2.1x plain generate() in a quiet window).
        filled = numpy.empty(floats, dtype=numpy.float32)
        filled.fill(0.0)
        self.buffer = torch.from_numpy(filled)
        self._spans: collections.deque[_Span] = collections.deque()  # taken, oldest first
        self._head = 0  # where the next stretch starts
        self._lock = threading.Lock()

    def hold(self, logits: torch.Tensor | None, spans: list[_Span]) -> torch.Tensor | None:
        """A copy of `logits` in the buffer (its stretch appended to `spans`), or `logits` itself where there is no
        room, or it is not a float32 tensor in main memory."""
        if logits is None or logits.dtype != torch.float32 or logits.device.type != "cpu":
            return logits
        size = logits.numel()
        with self._lock:
            start = self._place(size)
            if start is None:
                return logits
            span = _Span(start, start + size, self.buffer[start:start + size].view(logits.shape), self)
            self._spans.append(span)
            self._head = span.end
        span.view.copy_(logits)
        spans.append(span)
        return span.view

    def _place(self, size: int) -> int | None:
        """Where a stretch of `size` floats fits (None: nowhere). Taken stretches lie in [first, head), or, once the
        ring wrapped, in [first, capacity) and [0, head)."""
        if not 0 < size <= self.buffer.numel():
            return None
        if not self._spans:
            self._head = 0
            return 0
        first = self._spans[0].start
        if first < self._head:  # not wrapped
            if self._head + size <= self.buffer.numel():
                return self._head
            return 0 if size <= first else None
        return self._head if self._head + size <= first else None

    def release(self, span: _Span) -> None:
        """The step's copy was digested: its stretch (and every freed one before it) can be taken again."""
        with self._lock:
            span.freed = True
            while self._spans and self._spans[0].freed:
                self._spans.popleft()

    def reset(self) -> None:
        with self._lock:
            self._spans.clear()
            self._head = 0


_SPARE_HELD: list[_HeldLogits] = []  # one buffer kept between runs (a process pays for its pages once)
_SPARE_HELD_LOCK = threading.Lock()


def _take_held(floats: int) -> _HeldLogits | None:
    """A buffer of `floats` floats for one run: the spare one when it is free and of that size, else a new one."""
    if floats <= 0:
        return None
    with _SPARE_HELD_LOCK:
        if _SPARE_HELD and _SPARE_HELD[0].buffer.numel() == floats:
            return _SPARE_HELD.pop()
    return _HeldLogits(floats)


def _give_back_held(held: _HeldLogits) -> None:
    """The run is over (its steps built): keep the buffer for the next run, unless one is kept already."""
    held.reset()
    with _SPARE_HELD_LOCK:
        if not _SPARE_HELD:
            _SPARE_HELD.append(held)


LOOKUP_CONTEXT_TOKENS = 48  # tokens decoded on each side of prompt lookup's source (then cut to LOOKUP_CONTEXT_CHARS)


class _Recorder:
    """Timestamps the loop's phases and pushes raw step records on a queue (no display work here, unless the
    consumer is more than MAX_PENDING_LOGITS queued items behind).

    Every stamp ends one phase and begins the next, so the phases tile the `generate()` call:
    setup → [draft → verify → other] per step. A step begins when drafting begins (`get_candidates`)
    or, with no drafter (baseline), when the target's forward begins; its tokens are decided when
    `update_candidate_strategy` is called (baseline: when the streamer receives the token).
    """

    def __init__(self, out: "queue.SimpleQueue[Any]", sync: Callable[[], None] | None, watch: _ScoreWatch,
                 digest: Callable[[_Raw], None] = lambda raw: None, held: _HeldLogits | None = None,
                 batched: bool = False):
        self.out = out
        # A run nobody watches (`batched`) puts its records on `out` in lists (`flush`), so the
        # consumer wakes a few times a run (HELD_BATCHES); otherwise each step as it is decided (the page shows it).
        self._batch: list[Any] | None = [] if batched else None
        self._batch_bytes = 0
        self._batch_limit = _held_batch_bytes()
        self._closed: _Other | _Setup | None = None  # the phase closed at the current step's start (`_close_phase`)
        self.held = held  # where a run nobody watches copies its logits (`_HeldLogits`); None: keeps the tensors
        self.sync = sync
        self.watch = watch  # told when the drafter runs (its scores are not the target's)
        self.digest = digest  # a step's logits to figures (only used here when the consumer fell far behind)
        self._scores: torch.Tensor | None = None  # plain decoding: the scores the last token was picked from
        self.started = 0.0  # set by the caller right before generate()
        self._step_start: float | None = None
        self._decided: float | None = None  # when the last step's tokens were decided
        self._draft_end = 0.0
        self._draft_ms = 0.0
        self._draft: torch.Tensor | None = None
        self._q: torch.Tensor | None = None
        self._draws: torch.Tensor | None = None  # this step's r, handed over by `draw_tap` (sampling with q only)
        self._cur_len = 0
        self.pushed = 0  # step records put on the queue (the worker may be ahead of the consumer)
        self.waited = 0.0  # seconds the run waited between its steps for other runs' steps (`_Turns`)
        self._pending_wait = 0.0  # of which not yet taken out of a phase
        self._streamer: Any = None  # plain decoding's streamer (`streamer`)
        self._handed_early = False  # its current step was handed over before a pause (`hand_over_now`)

    def note_wait(self, seconds: float) -> None:
        """The run waited `seconds` for other runs' steps: the phase it fell in (the step's `other`; baseline: its
        `verify`, where Transformers' plain loop runs the stopping criteria) does not count it."""
        self.waited += seconds
        self._pending_wait += seconds

    def _take_wait(self) -> float:
        waited, self._pending_wait = self._pending_wait, 0.0
        return waited

    def _stamp(self) -> float:
        if self.sync is not None:
            self.sync()
        return time.perf_counter()

    def push(self, raw: _Raw) -> None:
        """Hand a step's record to the consumer (its logits copied into `held` where there is one and room); past
        MAX_PENDING_LOGITS waiting items, digested here first. Called after the step's tokens were decided: a copy
        falls in the step's `other` phase."""
        if raw.p_logits is not None and self._batch is None and self.out.qsize() > MAX_PENDING_LOGITS:
            self.digest(raw)
        elif self.held is not None:
            raw.q_logits = self.held.hold(raw.q_logits, raw.spans)
            raw.p_logits = self.held.hold(raw.p_logits, raw.spans)
        raw.before, self._closed = self._closed, None  # one hand-off per step, not two
        self.pushed += 1
        if self._batch is None:
            self.out.put(raw)
            return
        self._batch.append(raw)
        self._batch_bytes += raw.logits_bytes()
        if self._batch_bytes >= self._batch_limit:
            self.flush()

    def flush(self) -> None:
        """Hand over what is not handed over yet (the attempt ended, or a batch is full)."""
        if self._closed is not None:
            self._send(self._closed)
            self._closed = None
        if self._batch:
            self.out.put(self._batch)
            self._batch = []
            self._batch_bytes = 0

    def _send(self, item: Any) -> None:
        if self._batch is None:
            self.out.put(item)
        else:
            self._batch.append(item)

    def _close_phase(self, now: float) -> bool:
        """Record the time since the last mark: the setup (no step yet) or the last step's `other` phase, handed
        over with the next step's record (`push`) or when the attempt ends (`flush`). False when the current step's
        tokens are not decided yet (there is nothing to close)."""
        if self._step_start is None:
            closed: _Other | _Setup = _Setup((now - self.started) * 1000)
        elif self._decided is not None:
            closed = _Other((now - self._decided - self._take_wait()) * 1000)
        else:
            return False
        if self._closed is not None:  # a step decided without a record (not in Transformers' loops): in order anyway
            self._send(self._closed)
        self._closed = closed
        return True

    def begin_step(self) -> float:
        """A new step begins: close the previous step's `other` phase (or the setup)."""
        now = self._stamp()
        if not self._close_phase(now):  # another forward before this step's tokens were decided: same step
            return self._step_start
        self._decided = None
        self._step_start = now
        return now

    def take_draws(self, draws: torch.Tensor) -> None:
        """The random draws r `_speculative_sampling` compared with p/q in this step (`draw_tap.observing`)."""
        self._draws = draws

    def finish(self) -> float:
        """`generate()` returned: close the last step's `other` phase (or the setup, if no step ran)."""
        now = self._stamp()
        self._close_phase(now)  # handed over by the worker's `flush` after the attempt (`LiveRun._work`)
        return now

    # assisted decoding: patch the generator instance Transformers builds
    def instrument(self, generator: Any) -> Any:
        get_candidates = generator.get_candidates
        update = generator.update_candidate_strategy

        def timed_get_candidates(input_ids: torch.Tensor, *args: Any, **kwargs: Any) -> Any:
            start = self.begin_step()
            self.watch.drafting = True
            try:
                candidate_ids, candidate_logits = get_candidates(input_ids, *args, **kwargs)
            finally:
                self.watch.drafting = False
            self._draft_end = self._stamp()
            self._draft_ms = (self._draft_end - start) * 1000
            self._cur_len = input_ids.shape[1]
            self._draft = candidate_ids[0, self._cur_len:].clone()
            self._q = candidate_logits[0] if candidate_logits is not None else None
            return candidate_ids, candidate_logits

        def observed_update(input_ids: torch.Tensor, scores: torch.Tensor, num_matches: int) -> Any:
            self._decided = self._stamp()
            self.push(_Raw(self._draft, input_ids[0, self._cur_len:].clone(), input_ids.shape[1], self._draft_ms,
                           (self._decided - self._draft_end) * 1000, self._q, scores[0], self._draws))
            self._draft = self._q = self._draws = None
            return update(input_ids, scores, num_matches)

        generator.get_candidates = timed_get_candidates
        generator.update_candidate_strategy = observed_update
        return generator

    # plain decoding: the target's forward begins a step, the streamer sees its token (after the prompt)
    def forward_pre_hook(self, module: Any, args: Any) -> None:
        self.begin_step()

    def streamer(self, prompt_len: int) -> BaseStreamer:
        recorder = self

        class _StepStreamer(BaseStreamer):
            def __init__(self) -> None:
                self.seen_prompt = False
                self.total = prompt_len

            def put(self, value: torch.Tensor) -> None:
                if not self.seen_prompt:
                    self.seen_prompt = True
                    return
                if recorder._handed_early:  # handed over before the run paused (`hand_over_now`)
                    recorder._handed_early = False
                    return
                self.decide(value)

            def decide(self, value: torch.Tensor) -> None:
                recorder._decided = recorder._stamp()
                tokens = value.reshape(-1).clone()
                self.total += tokens.shape[0]
                verify_ms = (recorder._decided - (recorder._step_start or recorder._decided) - recorder._take_wait()) * 1000
                scores, recorder._scores = recorder._scores, None
                recorder.push(_Raw(None, tokens, self.total, 0.0, verify_ms, None, scores))

            def end(self) -> None:
                pass

        self._streamer = _StepStreamer()
        return self._streamer

    def hand_over_now(self, input_ids: torch.Tensor) -> None:
        """The run pauses after this step (`_Stop._pause`): its record must reach the consumer first. Assisted decoding
        handed it over already (`update_candidate_strategy` runs before the stopping criteria); Transformers' plain
        loop gives the streamer its token only after them, so the step's token is handed over here, and that put
        skipped."""
        if self._streamer is not None and not self._handed_early:
            self._streamer.decide(input_ids[0, -1:].cpu())
            self._handed_early = True


@contextlib.contextmanager
def _instrumented(model: Any, recorder: _Recorder) -> Iterator[None]:
    """Wrap this model instance's candidate-generator factory for one run (restored after)."""
    factory = type(model)._get_candidate_generator

    def build(*args: Any, **kwargs: Any) -> Any:
        return recorder.instrument(factory(model, *args, **kwargs))

    model._get_candidate_generator = build
    try:
        yield
    finally:
        del model._get_candidate_generator


class _TappedProcessors(LogitsProcessorList):
    """Plain decoding's processor list as Transformers built it (every processor and sampling warper, unchanged), which
    also hands the recorder the scores the token is picked from (a reference: nothing is copied or computed). The list
    itself, not one more processor in it: Transformers reads each processor's signature every step
    (`inspect.signature`), 134 Python calls a step for one more processor, counted by `tests/overhead.py --profile`;
    this costs one call."""

    def __init__(self, processors: LogitsProcessorList, recorder: _Recorder):
        super().__init__(processors)
        self.recorder = recorder

    def __call__(self, input_ids: torch.LongTensor, scores: torch.Tensor, **kwargs: Any) -> torch.Tensor:
        scores = super().__call__(input_ids, scores, **kwargs)
        self.recorder._scores = scores
        return scores


@contextlib.contextmanager
def _step_starts_at_forward(model: Any, recorder: _Recorder) -> Iterator[None]:
    """Plain decoding: each target forward begins a step, and the processor list (the sampling warpers Transformers
    appends behind the caller's processors included) hands the recorder its scores (hook and wrapper removed after)."""
    handle = model.register_forward_pre_hook(recorder.forward_pre_hook)
    factory = type(model)._get_logits_processor

    def processors(*args: Any, **kwargs: Any) -> LogitsProcessorList:
        return _TappedProcessors(factory(model, *args, **kwargs), recorder)

    model._get_logits_processor = processors
    try:
        yield
    finally:
        handle.remove()
        del model._get_logits_processor


_DONE = object()
_RESTART = object()  # the run gave way and starts again: its steps so far are void
_IDLE = object()  # no step came for `LiveRun.idle_s` (the run stands paused, or its step is long)


def _handed_over(received: Any) -> list[Any] | tuple[Any]:
    """The records one hand-off carries: a batch's (`_Recorder.flush`), or the one record."""
    return received if isinstance(received, list) else (received,)


def _unpacked(received: Any) -> Iterator[Any]:
    """The records a hand-off carries, in order, each step's closed phase (`_Raw.before`) before it."""
    for item in _handed_over(received):
        if isinstance(item, _Raw) and item.before is not None:
            yield item.before
        yield item


# The generation worker's name as the operating system sees it (/proc/<pid>/task/*/comm, `top -H`,
# `ps -L`): Python 3.11 does not pass thread names down, and Linux keeps at most 15 bytes.
WORKER_OS_THREAD_NAME = "pg-generate"


def _name_os_thread(name: str) -> None:
    """Name the calling OS thread (Linux only; elsewhere, or on any failure, nothing happens)."""
    if not sys.platform.startswith("linux"):
        return
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(15, name.encode()[:15], 0, 0, 0)  # 15 = PR_SET_NAME
    except Exception:  # naming is for observers only; never fail a run over it
        pass


def environment(prepared: PreparedRun) -> dict[str, Any]:
    return {
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "python": platform.python_version(),
        "device": prepared.target.device,
        "dtype": prepared.precision.dtype,
        "precision": prepared.precision.reason,
        "threads": torch.get_num_threads(),
        "machine": platform.machine(),
    }


class LiveRun:
    """One generation: iterate to receive `Step`s as they happen; `trace` grows as you go."""

    def __init__(self, prepared: PreparedRun, timeout_s: float | None = None, pace: Pace | None = None):
        self.prepared = prepared
        req = prepared.request
        self.timeout_s = get_settings().run_timeout_s if timeout_s is None else timeout_s
        self.cancel = threading.Event()
        self._queue: "queue.SimpleQueue[Any]" = queue.SimpleQueue()  # put, get and qsize in C: no Python per hand-off
        self._error: BaseException | None = None
        self._elapsed = 0.0
        self._start = 0.0
        self._ensemble_weight: float | None = prepared.generate_kwargs.get("assistant_ensemble_weight")
        self._thread: threading.Thread | None = None
        self._recorder: _Recorder | None = None  # the current attempt's
        self._watch = _ScoreWatch()
        self._stop = _Stop(self.cancel, None, self._watch)
        # A visitor's run at a pace stops after its steps as `pace` asks (`_Stop._pause`); each pause at most the run's
        # time limit. While it stands paused its consumer hears None every `idle_s` (`__iter__`), so the page's handler
        # yields and notices a visitor who left.
        self.pace = self._stop.pace = pace
        self._stop.pause_limit_s = self.timeout_s or None
        self.idle_s: float | None = None
        self.gave_way = 0  # times this run gave way to a visitor's run and started again (`run`)
        self._turns: _Turns | None = None  # a run that is not redone takes turns per step with the others like it
        self.trace = Trace(
            method=prepared.method.name, target=req.target, prompt=req.prompt,
            assistant=req.assistant if prepared.assistant else None, params=dict(prepared.params),
            decoding=req.decoding(), chat=prepared.chat, lossy=prepared.lossy, env=environment(prepared),
            system=req.system if prepared.chat else None,
            chat_template_kwargs=dict(req.chat_template_kwargs) if prepared.chat else {},
            prompt_tokens=int(prepared.input_ids.shape[1]),
            vocab_size=int(prepared.target.model.config.get_text_config().vocab_size),
        )
        self._top_k = get_settings().top_k  # the step microscope's k (0: nothing recorded)
        self.trace.decoding["recorded_top_k"] = self._top_k
        self._texts: dict[int, str] = {}  # token id -> text, for the microscope's top-k lists
        self._anchor = prepared.input_ids[0, -4:].tolist()  # the top-k texts read as they follow the prompt's end
        self._anchor_text: str | None = None
        self._context = _ContextTexts(prepared.target.tokenizer, prepared.input_ids[0].tolist())
        self._totals = StepTotals()  # the live summary's sums (`StepTotals`)
        self.held = False  # nobody sees the steps as they come: they are built after generation (`_items`)
        self._held_logits: _HeldLogits | None = None  # where such a run's worker copies its logits (`_HeldLogits`)
        # A run shown as it comes: its steps whose figures (q, p, mixture, the microscope's lists) are not filled in
        # yet, by index, oldest first, with the bytes of logits they hold (`_figures_later`).
        self._later: collections.OrderedDict[int, tuple[_Raw, Step]] = collections.OrderedDict()
        self._later_bytes = 0
        self._later_lock = threading.Lock()  # the consumer and a microscope opened during the run (`figures_now`)

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    @property
    def generated_steps(self) -> int:
        """Steps the current attempt has generated so far: ahead of `trace.steps` while the consumer catches up, and
        until generation ends when nobody watches (`held`)."""
        return self._recorder.pushed if self._recorder is not None else 0

    def stop(self) -> None:
        """Ask generation to end after the current step; what was produced is kept."""
        self.cancel.set()

    def _work(self) -> None:
        _name_os_thread(WORKER_OS_THREAD_NAME)
        try:
            while True:
                try:
                    self._attempt()
                finally:
                    if self._recorder is not None:  # what the attempt recorded reaches the consumer before the end
                        self._recorder.flush()
                if not self._stop.gave_way or self._error is not None or self.cancel.is_set():
                    break
                # A visitor's own run asked for the models: this long job's run ended at its step and starts again
                # from the beginning once that run is done (`_turn`); the consumer drops what it has (`_RESTART`).
                self._stop.gave_way = False
                self.gave_way += 1
                self._queue.put(_RESTART)
        finally:
            self._queue.put(_DONE)

    def _attempt(self) -> None:
        prepared = self.prepared
        model = prepared.target.model
        recorder = self._recorder = _Recorder(self._queue, _device_sync(model), self._watch, self._digest,
                                              self._held_logits, batched=self.held)
        kwargs = dict(prepared.generate_kwargs)
        kwargs["stopping_criteria"] = StoppingCriteriaList([self._stop])
        if prepared.method.observed_by == "streamer":
            kwargs["streamer"] = recorder.streamer(prepared.input_ids.shape[1])

        def hooks() -> list[contextlib.AbstractContextManager[Any]]:
            patch = (_step_starts_at_forward(model, recorder) if prepared.method.observed_by == "streamer"
                     else _instrumented(model, recorder))
            managers = [self._watch.watching(model), patch]
            if prepared.request.sample and prepared.method.observed_by != "streamer":
                managers.append(draw_tap.observing(recorder.take_draws))  # the random draw r of each step
            return managers

        # A run redone when it gives way (a long job's `run`) holds its models for the whole attempt; any other run
        # (a visitor's own, an MCP generate) takes turns per step with the others, its hooks on the model per turn.
        turns = None if self._stop.gives_way else _Turns(prepared, self.cancel, hooks, self._stop.job)
        self._turns = self._stop.turns = turns
        # Its job's stop event ends any run; only a long job's run (the one that gives way) also waits in `_turn` for
        # the visitors' runs. An MCP generate is a visitor's own run that its agent's leaving stops (`_Turns.job`).
        long_job = self._stop.job if self._stop.gives_way else None
        self._stop.max_length = prepared.input_ids.shape[1] + prepared.request.max_new_tokens
        self._stop.eos_ids = prepared.eos_ids

        self._stop.on_wait = recorder.note_wait
        self._stop.before_pause = recorder.hand_over_now
        try:
            with contextlib.ExitStack() as stack:
                stack.enter_context(exclusive(prepared, long_job, turns))
                stack.enter_context(torch.inference_mode())
                if turns is None:
                    for manager in hooks():
                        stack.enter_context(manager)
                self._start = recorder.started = recorder._stamp()
                self._stop.deadline = self._start + self.timeout_s if self.timeout_s else None
                model.generate(**kwargs)
                self._elapsed = recorder.finish() - self._start - recorder.waited
        except _StoppedWaiting:  # stopped before its first turn (its visitor or agent left): no step, nothing to report
            self.cancel.set()
            self._elapsed = 0.0
        except BaseException as exc:  # reported to the consumer, which re-raises it
            self._elapsed = time.perf_counter() - self._start - recorder.waited if self._start else 0.0
            self._error = exc

    def __iter__(self) -> Iterator[Step]:
        """The steps as they come (with `idle_s` set, also None after each `idle_s` without one)."""
        if self._thread is not None:
            raise RuntimeError("a LiveRun can be iterated once")
        check_stopped()  # a stopped job starts no further run
        if self.pace is not None:
            self.pace.begin_run()
        # A run shown as it comes keeps Transformers' tensors: its first step should not wait for a buffer's pages,
        # and the spare buffer stays free for a run nobody watches started meanwhile (an MCP generate).
        if self.held and torch.device(self.prepared.target.device).type == "cpu":
            self._held_logits = _take_held(HELD_LOGITS_BYTES // 4)  # its pages written here, before generate() starts
        self._thread = threading.Thread(target=self._work, name="playground-generate", daemon=True)
        self._thread.start()
        try:
            for item in self._items():
                if item is _IDLE:
                    yield None  # type: ignore[misc]  # only with `idle_s` set: the consumer's chance to yield
                    continue
                if item is _RESTART:
                    self._restart_trace()
                    continue
                if isinstance(item, _Setup):
                    self.trace.setup_ms = round(item.ms, 3)
                    continue
                if isinstance(item, _Other):
                    if self.trace.steps:
                        self.trace.steps[-1].other_ms = round(item.ms, 3)
                        self._totals.other_ms += self.trace.steps[-1].other_ms
                    continue
                step = self._build_step(item)
                self.trace.steps.append(step)
                self.trace.output_ids.extend(step.emitted)
                self._context.extend(step.emitted)
                self._totals.add(step)
                self.trace.summary = self._totals.summary(time.perf_counter() - self._start - self._recorder.waited,
                                                          self.trace.setup_ms)
                if self.held or item.digested:
                    self._fill_figures(item, step)
                else:
                    self._figures_later(item, step)
                yield step
            self._figures_now_for(None)  # generation has ended: the figures of every step still deferred
        finally:
            if self._thread.is_alive():  # the consumer left early (closed tab, exception): end the run
                self.cancel.set()
                self._thread.join()
            with self._later_lock:  # left early: what is still deferred is dropped, before the buffer is reused
                for raw, _ in self._later.values():
                    raw.release()
                self._later.clear()
                self._later_bytes = 0
            if self._held_logits is not None:  # every step is built (or dropped): nothing reads the buffer any more
                _give_back_held(self._held_logits)
                self._held_logits = None
        self._finish()

    def _items(self) -> Iterator[Any]:
        """The worker's records as they come, until generation ends. When nobody sees the steps as they come
        (`run`: Tune, Compare, the CLI, benchmarks), the steps are built once generation has ended: on a machine whose
        cores generation keeps busy, that work (softmax and top-k, texts, prompt lookup's source, the summary) and the
        interpreter lock it holds would slow the generation being timed. The worker hands such a run's records over in
        batches (`_Recorder.flush`); only the logits past three quarters of HELD_LOGITS_BYTES are digested while
        generation runs (oldest first, when a batch comes), so memory does not grow with the run and the buffer has
        room for the next batch. The steps come out the same, in the same order."""
        held: list[Any] = []
        undigested: collections.deque[_Raw] = collections.deque()  # oldest first
        held_bytes = 0
        while True:
            if self.idle_s is None or self.held:
                received = self._queue.get()
            else:
                try:
                    received = self._queue.get(timeout=self.idle_s)
                except queue.Empty:
                    yield _IDLE
                    continue
            if received is _DONE:
                break
            if not self.held:
                yield from _unpacked(received)
                continue
            if received is _RESTART:  # the attempt held so far gave way: its steps would only be built to be dropped
                for raw in undigested:
                    raw.release()
                held.clear()
                undigested.clear()
                held_bytes = 0
            for item in _handed_over(received):
                held.append(item)
                if isinstance(item, _Raw) and not item.digested:
                    undigested.append(item)
                    held_bytes += item.logits_bytes()
            # Room in the buffer for the next batch, which the worker copies into while this digests the oldest.
            while held_bytes > _held_digest_above():
                oldest = undigested.popleft()
                held_bytes -= oldest.logits_bytes()
                self._digest(oldest)
        for item in held:
            yield from _unpacked(item)

    def _figures_later(self, raw: _Raw, step: Step) -> None:
        """A step shown as it comes gets its figures (`_fill_figures`) when generation has ended, or when the microscope
        opens it (`figures_now`): the softmax and top-k over each of its vocabulary-wide rows would otherwise take the
        cores and the interpreter lock from the generation being timed. Past three quarters of HELD_LOGITS_BYTES of
        deferred logits the oldest are filled in while generation runs (memory does not grow with the run, and the
        buffer has room for the next step), as a held run does (`_items`)."""
        with self._later_lock:
            self._later[step.index] = (raw, step)
            self._later_bytes += raw.logits_bytes()
            while self._later_bytes > _held_digest_above():
                _, (oldest, its_step) = self._later.popitem(last=False)
                self._later_bytes -= oldest.logits_bytes()
                self._fill_figures(oldest, its_step)

    def figures_now(self, step_index: int) -> None:
        """Fill in the figures of the step `step_index` now if they are still deferred (`_figures_later`): the
        microscope opened one of its tokens while the run goes on. Safe from any thread."""
        self._figures_now_for([step_index])

    def _figures_now_for(self, indices: list[int] | None) -> None:
        """Fill in the deferred figures of the steps `indices` (None: every step still deferred, read under the lock
        that `figures_now` from another thread takes too)."""
        with self._later_lock:
            for index in list(self._later) if indices is None else indices:
                entry = self._later.pop(index, None)
                if entry is not None:
                    self._later_bytes -= entry[0].logits_bytes()
                    self._fill_figures(*entry)

    def _restart_trace(self) -> None:
        """The run starts again (it gave way): the trace forgets the steps of the attempt it ended."""
        self.trace.steps.clear()
        self.trace.output_ids.clear()
        self.trace.setup_ms = 0.0
        self._context = _ContextTexts(self.prepared.target.tokenizer, self.prepared.input_ids[0].tolist())
        self._totals = StepTotals()

    def _finish(self) -> None:
        trace = self.trace
        tok = self.prepared.target.tokenizer
        trace.output_text = tok.decode(trace.output_ids, skip_special_tokens=True)
        trace.summarize(self._elapsed)
        if self._turns is not None:
            trace.waited_ms = round(self._turns.waited_s * 1000, 3)
            trace.paused_ms = round(self._turns.paused_s * 1000, 3)
        if self._watch.tripped():  # also when sampling then failed on the NaN scores: this is why
            trace.finish_reason = "error"
            reason = non_finite_message(self.prepared.target.model.dtype, len(trace.output_ids))
            raise RunError.keyed(reason.key, **reason.fields)
        if self._error is not None:
            trace.finish_reason = "error"
            raise self._error
        if self._stop.timed_out:
            trace.finish_reason = "timeout"
        elif self.cancel.is_set():
            trace.finish_reason = "stopped"
        elif trace.output_ids and trace.output_ids[-1] in self.prepared.eos_ids:
            trace.finish_reason = "eos"
        else:
            trace.finish_reason = "length"

    def run(self) -> Trace:
        """Run to the end; nobody sees the steps as they come, so a long job's run (`stopped_by`) gives way to a
        visitor's own run at its next step and is redone whole after it (the trace is the undisturbed attempt's)."""
        self._stop.gives_way = self._stop.job is not None
        self.held = True
        for _ in self:
            pass
        return self.trace

    def _digest(self, raw: _Raw) -> None:
        _digest(raw, self._top_k, self.prepared.request.sample, self._ensemble_weight)

    def _token_text(self, token: int) -> str:
        """A top-k token's text as it reads after the prompt's last tokens (so a leading space shows), cached."""
        text = self._texts.get(token)
        if text is None:
            tok = self.prepared.target.tokenizer
            if self._anchor_text is None:
                self._anchor_text = _decode(tok, self._anchor)
            text = self._texts[token] = _text_after(tok, self._anchor, self._anchor_text, token)
        return text

    def _dists(self, raw: _Raw, refused: bool) -> list[Position] | None:
        """The microscope's positions of a step with their texts; the residual only where a draft was refused."""
        dists = raw.dists
        for position in dists or ():
            if not refused:
                position.residual = None
            for ranked in (position.p, position.q, position.v, position.residual):
                for entry in ranked or ():
                    entry.text = self._token_text(entry.id)
        return dists

    def _lookup_source(self, drafted: list[int]) -> tuple[list[int] | None, list[str] | None]:
        """Prompt lookup: [start, end) of the n-gram the draft was copied after, by replaying Transformers' rule
        (the longest n-gram first, its earliest occurrence) on the context, and that place as the text the model saw
        (`Step.lookup_text`: the templated prompt under a chat template); (None, None) unless the replay drafts
        exactly what the run drafted."""
        if not drafted or self.prepared.method.draft_replay != "context_copy":
            return None, None
        params, prepared = self.prepared.params, self.prepared
        context = self._context.ids  # prompt + output before this step
        draft, span = prompt_lookup_match(
            context, int(params["prompt_lookup_num_tokens"]), int(params["max_matching_ngram_size"]),
            prepared.input_ids.shape[1] + prepared.request.max_new_tokens, prepared.eos_ids)
        if span is None or draft != drafted:
            return None, None
        return list(span), lookup_text(prepared.target.tokenizer, context, span[0], span[1], span[1] + len(drafted),
                                       self._context.span)

    def _build_step(self, raw: _Raw) -> Step:
        """Everything shown about a step but its figures (`_fill_figures`), computed here in the consumer's thread,
        outside the timed phases."""
        drafted = raw.drafted.tolist() if raw.drafted is not None else []
        emitted = raw.emitted.tolist()
        prepared = self.prepared
        cut = bool(emitted) and (emitted[-1] in prepared.eos_ids
                                 or raw.total_len - prepared.input_ids.shape[1] >= prepared.request.max_new_tokens)
        accepted, rejected, discarded, unverified = classify_step(drafted, emitted, cut)
        no_draft_reason = ""
        if not drafted and prepared.method.drafts:
            prompt_len = prepared.input_ids.shape[1]
            no_draft_reason = prepared.method.empty_draft_reason(EmptyDraft(
                context=prepared.input_ids[0].tolist() + self.trace.output_ids, first_step=not self.trace.steps,
                last_position=raw.total_len - len(emitted) + 1 == prompt_len + prepared.request.max_new_tokens,
                params=prepared.params, eos_ids=prepared.eos_ids))
        tok = prepared.target.tokenizer
        before = len(self._context.ids)
        emitted_text = self._context.span(before, before + len(emitted), emitted)
        # The accepted drafts read as the emitted tokens they are (the same tokens after the same context).
        drafted_text = emitted_text[:accepted] + token_texts(tok, (self._context.ids + drafted[:accepted])[-4:],
                                                             drafted[accepted:])
        source, source_text = self._lookup_source(drafted)
        return Step(
            index=len(self.trace.steps), drafted=drafted, accepted=accepted, rejected=rejected, discarded=discarded,
            emitted=emitted, unverified=unverified, drafted_text=drafted_text, emitted_text=emitted_text,
            draft_ms=round(raw.draft_ms, 3), verify_ms=round(raw.verify_ms, 3),
            no_draft_reason=no_draft_reason, lookup_source=source, lookup_text=source_text,
            # One draw per drafted token (Transformers draws `candidate_length` of them); anything else is not kept.
            draws=(raw.draws.float().tolist() if raw.draws is not None and drafted
                   and raw.draws.numel() == len(drafted) else None),
        )

    def _fill_figures(self, raw: _Raw, step: Step) -> None:
        """The step's figures from its logits (`_digest`, unless done): the drafted tokens' q and p, ensemble
        verification's mixture, the microscope's top-k lists with their texts."""
        if not raw.digested:
            self._digest(raw)
        q, p = step.q, step.p = raw.q, raw.p
        w = self._ensemble_weight
        step.mixture = [w * pk + (1 - w) * qk for pk, qk in zip(p, q)] if w is not None and p and q else None
        step.dists = self._dists(raw, bool(step.rejected))


def lookup_text(tokenizer: Any, context: list[int], start: int, end: int, copy_end: int,
                span_texts: Callable[[int, int], list[str]] | None = None) -> list[str]:
    """The text around prompt lookup's source in `context` (token ids, as the model saw them): [before, the n-gram
    context[start:end], the copy context[end:copy_end], after], each token read as it follows the ones before it
    (`token_texts`), with at most LOOKUP_CONTEXT_CHARS of text on each side. `span_texts(a, b)`: those texts of
    context[a:b] where they are at hand (`_ContextTexts.span`)."""
    first = max(0, start - LOOKUP_CONTEXT_TOKENS)
    last = min(len(context), copy_end + LOOKUP_CONTEXT_TOKENS)
    texts = (span_texts(first, last) if span_texts is not None
             else token_texts(tokenizer, context[max(0, first - 4):first], context[first:last]))

    def joined(a: int, b: int) -> str:
        return "".join(texts[a - first:b - first])

    return [joined(first, start)[-LOOKUP_CONTEXT_CHARS:], joined(start, end), joined(end, copy_end),
            joined(copy_end, last)[:LOOKUP_CONTEXT_CHARS]]


def token_texts(tokenizer: Any, context: list[int], ids: list[int]) -> list[str]:
    """Text of each token as it reads after `context` and the tokens before it.

    Decoding a token alone loses leading spaces in SentencePiece-style tokenizers; decoding it
    behind a few tokens of context and taking the difference keeps them.
    """
    texts: list[str] = []
    ctx = list(context[-4:])
    for tid in ids:
        texts.append(_text_after(tokenizer, ctx, _decode(tokenizer, ctx), tid))
        ctx = (ctx + [tid])[-4:]
    return texts


def _decode(tokenizer: Any, ids: list[int]) -> str:
    return tokenizer.decode(ids, skip_special_tokens=False, clean_up_tokenization_spaces=False)


def _text_after(tokenizer: Any, ctx: list[int], ctx_text: str, tid: int) -> str:
    """`token_texts` of one token after `ctx`, whose own text (`_decode`) is `ctx_text`."""
    after = _decode(tokenizer, ctx + [tid])
    if after.startswith(ctx_text):
        return after[len(ctx_text):]
    return tokenizer.decode([tid], skip_special_tokens=False)


class _ContextTexts:
    """The run's context (prompt + output so far) and the text of each of its tokens as it reads after the up to 4
    tokens before it (`token_texts`), each decoded once: a step's emitted tokens and prompt lookup's source (about a
    hundred tokens around it, every step) read from here instead of being decoded again."""

    def __init__(self, tokenizer: Any, prompt_ids: list[int]):
        self.tokenizer = tokenizer
        self.ids = prompt_ids
        self._texts: dict[int, str] = {}  # position -> text

    def extend(self, ids: list[int]) -> None:
        self.ids.extend(ids)

    def span(self, start: int, end: int, ahead: list[int] | None = None) -> list[str]:
        """Texts of the tokens at positions [start, end); `ahead`: the tokens from len(ids) on, not yet added."""
        ids = self.ids if not ahead else self.ids + ahead
        out = []
        for j in range(start, end):
            text = self._texts.get(j)
            if text is None:
                text = self._texts[j] = token_texts(self.tokenizer, ids[max(0, j - 4):j], [ids[j]])[0]
            out.append(text)
        return out


def run(req: RunRequest, store: ModelStore = STORE, progress: Callable[[str], None] | None = None,
        on_step: Callable[[Step, Trace], None] | None = None) -> Trace:
    """Prepare and run to the end; `on_step` sees each step as it arrives."""
    live = LiveRun(prepare(req, store, progress))
    live.held = on_step is None  # nobody sees the steps as they come: built after generation (`LiveRun._items`)
    for step in live:
        if on_step is not None:
            on_step(step, live.trace)
    return live.trace


def user_message(exc: BaseException, failed: str = "this request", lang: str = DEFAULT_LANGUAGE) -> str:
    """One line for the user from any failure: our own messages verbatim (in `lang` where they carry a key).
    Anything else is a bug or the machine, not the user's input: one plain sentence saying so (`failed`: what
    failed, in `lang`), never the exception's text (it may quote the input at length); the full traceback goes
    to the server's log."""
    if isinstance(exc, (PlaygroundError, MethodError, TraceFormatError)):
        return localized_message(exc, lang)
    logger.error("%s failed unexpectedly", failed, exc_info=exc)
    if isinstance(exc, (MemoryError, torch.OutOfMemoryError)):
        return t("error.out_of_memory", lang, failed=failed)
    return t("error.internal", lang, failed=failed)
