"""From a request to a `PreparedRun`: the request checked, the models loaded, the prompt rendered (chat template,
system message, template variables), and the exact `generate()` arguments built."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Callable

import torch

from ..compat.transformers_internals import SHARED_KV_DRAFTERS, SHARED_KV_TARGETS
from ..methods import ModelFacts, get_method
from ..models import (
    CATALOGUE, HUB_ID_RE, STORE, LoadedModel, ModelStore, default_device,
    resolve_precision, same_vocabulary,
)
from ..request import RunRequest, method_for
from ..settings import get_settings
from .prepared import PreparedRun, RunError
from .sources import source_class


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
    target_class = type(target.model).__name__
    assistant_class = type(assistant.model).__name__ if assistant else None
    return ModelFacts(
        target_class=target_class,
        target_layers=target.num_layers,
        target_has_mtp=has_mtp,
        target_on_disk=on_disk,
        assistant_class=assistant_class,
        target_reads_shared_kv=target_class.startswith(SHARED_KV_DRAFTERS),
        assistant_reads_shared_kv=bool(assistant_class and assistant_class.startswith(SHARED_KV_DRAFTERS)),
        target_shares_kv=target_class.startswith(SHARED_KV_TARGETS),
        same_vocabulary=same_vocabulary(target.tokenizer, assistant.tokenizer) if assistant else None,
        sample=sample,
        target_vocab_size=getattr(text_config, "vocab_size", None),
        assistant_vocab_size=getattr(assistant.model.config.get_text_config(), "vocab_size", None) if assistant else None,
        target_mtp_weights=_mtp_weights_on_disk(target.model) if has_mtp and on_disk else None,
    )


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
    # `auto` as it stands now: float32 until this machine's measurement is kept (the server makes it in the background,
    # `models.speed`), so no run waits for it; the record's sentence says which ran and why.
    precision = resolve_precision(req.dtype)
    target = store.get(req.target, precision, progress)
    assistant: LoadedModel | None = None
    adaptations: tuple[str, ...] = ()
    if method.needs_assistant:
        # Its draft source says which (a source that adapts its assistant in place, universal decoding with sampling,
        # gets a dedicated copy) and what was done to it.
        assistant, adaptations = source_class(method).load_assistant(store, req, precision, target, progress)
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
    owner = target.model if method.draft_config_on_target or assistant is None else assistant.model
    return PreparedRun(
        request=req, method=method, params=params, target=target, assistant=assistant, input_ids=input_ids,
        rendered_prompt=rendered, chat=chat, generate_kwargs=kwargs, draft_config=draft_config,
        draft_config_model=owner, eos_ids=_eos_ids(target), lossy=method.is_lossy(params, req.sample),
        precision=precision, assistant_adaptations=adaptations,
    )
