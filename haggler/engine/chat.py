"""How a model's own chat template frames a negotiation, learned once from the template itself.

A local model's negotiation is one growing token sequence (token-in/token-out, never re-rendered). Its first
prompt is the template's rendering of the system prompt and the first observation; after that the engine
writes the template's text between turns itself. ``ChatFormat.probe`` renders placeholders once to learn that
text, and how the template treats what haggler needs of it:

- **the system prompt**: templates with a system role (Gemma 4, Llama 3, Qwen, SmolLM2) take it as given, and so
  do templates that fold it into the first user turn themselves (Gemma 3). A template that refuses it (Gemma 2,
  Mistral-style ``[INST]`` templates raise "System role not supported") or drops it silently gets haggler's
  instructions at the top of the first user message instead;
- **strict alternation**: consecutive messages of one role are merged before rendering;
- **the end of an assistant turn**: the first special token the template writes after an assistant message
  (``<turn|>`` for Gemma 4, ``<end_of_turn>`` for Gemma 3, ``<|im_end|>`` for SmolLM2 and Qwen, ``<|eot_id|>``
  for Llama 3), not ``tokenizer.eos_token``, which for Gemma is ``<eos>``, a token its turns never end on;
- **thinking**: off by default (``enable_thinking=False`` reaches the template, which templates without a
  thinking mode ignore). On, the template must react to it, and the thought's markers are the pair of
  ``THOUGHT_MARKERS`` whose closing marker is one token of the vocabulary.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass, field
from typing import Any, Literal

_SYSTEM, _USER1, _REPLY, _USER2 = "\x00SYS\x00", "\x00U1\x00", "\x00A1\x00", "\x00U2\x00"

# How thinking templates mark a thought in the model's turn: (what opens it, the token that closes it).
# Gemma 4 writes "<|channel>thought\n...<channel|>" before its answer; Qwen3 and its descendants "<think>...</think>".
THOUGHT_MARKERS = (("<|channel>thought\n", "<channel|>"), ("<think>\n", "</think>"))


class ChatTemplateError(ValueError):
    """A tokenizer whose chat template cannot frame a negotiation (none at all, or no thinking mode asked for)."""


@dataclass(frozen=True)
class Thought:
    open: str  # the environment writes this when a thought begins
    close: str  # the token that ends a thought (a stop token of the thought's slot)
    close_id: int


@dataclass(frozen=True)
class ChatFormat:
    system: Literal["native", "folded"]  # folded: haggler's instructions open the first user message
    close_assistant: str  # after an assistant message's content, up to and including its end-of-turn token
    open_user: str  # between that and the next user message's content
    after_user: str  # after a user message's content, through the generation prompt
    end_of_turn: int  # the token id that closes an assistant turn
    thinking: bool = False
    thought: Thought | None = None  # set where ``thinking`` is on
    template_kwargs: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def probe(cls, tokenizer: Any, thinking: bool = False) -> ChatFormat:
        if not getattr(tokenizer, "chat_template", None):
            raise ChatTemplateError(f"{type(tokenizer).__name__} has no chat template; give the model folder one "
                                    "(tokenizer_config.json's chat_template or chat_template.jinja)")
        kwargs = {"enable_thinking": thinking}
        system: Literal["native", "folded"] = "native"
        try:
            text = _render(tokenizer, _history("native"), kwargs)
            # a template that drops the system message without a word, or moves it after the first user message
            # (Mistral v0.3's puts it into the last user turn: every later turn would carry it)
            if _SYSTEM not in text or text.index(_SYSTEM) > text.index(_USER1):
                raise ValueError("system message dropped or moved")
            _frame_parts(text)
        except Exception:  # noqa: BLE001 - jinja's TemplateError ("System role not supported") or the checks above
            system = "folded"
            text = _render(tokenizer, _history("folded"), kwargs)
            _frame_parts(text)
        between = text[text.index(_REPLY) + len(_REPLY): text.index(_USER2)]
        close, end_id = _end_of_turn(tokenizer, between)
        thought = _thought(tokenizer, system, kwargs) if thinking else None
        return cls(system=system, close_assistant=close, open_user=between[len(close):],
                   after_user=text[text.index(_USER2) + len(_USER2):], end_of_turn=end_id, thinking=thinking,
                   thought=thought, template_kwargs=kwargs)

    def messages(self, system: str, user: str) -> list[dict[str, str]]:
        """The first prompt's messages as this template takes them."""
        if self.system == "folded":
            return [{"role": "user", "content": f"{system}\n\n{user}"}]
        return [{"role": "system", "content": system}, {"role": "user", "content": user}]

    def first_prompt(self, tokenizer: Any, system: str, user: str) -> list[int]:
        """The token ids of the system prompt and first user message, through the generation prompt."""
        ids = tokenizer.apply_chat_template(merge_roles(self.messages(system, user)), add_generation_prompt=True,
                                            tokenize=True, **self.template_kwargs)
        return list(ids["input_ids"] if hasattr(ids, "keys") else ids)


def merge_roles(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Consecutive messages of one role as one (templates that enforce user/assistant alternation refuse them)."""
    out: list[dict[str, Any]] = []
    for m in messages:
        if out and out[-1]["role"] == m["role"] and isinstance(m.get("content"), str) \
                and isinstance(out[-1].get("content"), str) and set(m) == {"role", "content"}:
            out[-1] = {**out[-1], "content": f"{out[-1]['content']}\n\n{m['content']}"}
        else:
            out.append(dict(m))
    return out


_FORMATS: dict[tuple[int, bool], tuple[weakref.ref, ChatFormat]] = {}


def chat_format(tokenizer: Any, thinking: bool = False) -> ChatFormat:
    """``ChatFormat.probe``, once per tokenizer and thinking mode (a freed tokenizer's id may be reused by the
    next model's: the entry counts only while it still refers to this very tokenizer)."""
    key = (id(tokenizer), thinking)
    held = _FORMATS.get(key)
    if held is None or held[0]() is not tokenizer:
        _FORMATS[key] = (weakref.ref(tokenizer), ChatFormat.probe(tokenizer, thinking))
    return _FORMATS[key][1]


def end_of_turn_ids(generation_config: Any, tokenizer: Any) -> list[int]:
    """Every token that ends a model's turn: its generation_config's EOS ids, the tokenizer's EOS, and the
    template's end of turn (Gemma 3 270M's generation_config ends only at ``<eos>``; its turns end ``<end_of_turn>``)."""
    eos = getattr(generation_config, "eos_token_id", None)
    ids = set(eos if isinstance(eos, list) else [eos] if eos is not None else [])
    if tokenizer.eos_token_id is not None:
        ids.add(tokenizer.eos_token_id)
    if getattr(tokenizer, "chat_template", None):
        ids.add(chat_format(tokenizer).end_of_turn)
    return sorted(ids)


def _frame_parts(text: str) -> None:
    """The text the engine will write between turns must hold no placeholder: a template that repeats the system
    message in later turns cannot be framed with a native system role."""
    between = text[text.index(_REPLY) + len(_REPLY): text.index(_USER2)]
    after = text[text.index(_USER2) + len(_USER2):]
    if any(p in between or p in after for p in (_SYSTEM, _USER1, _REPLY, _USER2)):
        raise ValueError("the text between turns repeats a message")


def _history(system: str) -> list[dict[str, str]]:
    first = ([{"role": "system", "content": _SYSTEM}, {"role": "user", "content": _USER1}] if system == "native"
             else [{"role": "user", "content": f"{_SYSTEM}\n\n{_USER1}"}])
    return first + [{"role": "assistant", "content": _REPLY}, {"role": "user", "content": _USER2}]


def _render(tokenizer: Any, messages: list[dict[str, str]], kwargs: dict[str, Any]) -> str:
    return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True, **kwargs)


def _special_ids(tokenizer: Any) -> set[int]:
    ids = set(tokenizer.all_special_ids)
    ids |= {i for i, t in tokenizer.added_tokens_decoder.items() if getattr(t, "special", False)}
    return ids


def _end_of_turn(tokenizer: Any, between: str) -> tuple[str, int]:
    """The text through the first special token after an assistant message, and that token's id."""
    special = _special_ids(tokenizer)
    ids = tokenizer.encode(between, add_special_tokens=False)
    for k, i in enumerate(ids):
        if i in special:
            token = tokenizer.decode([i])
            cut = between.index(token) + len(token) if token in between else len(tokenizer.decode(ids[: k + 1]))
            return between[:cut], i
    eos = tokenizer.eos_token
    if eos and eos in between:  # a template whose turns end on the EOS text without a special token id
        return between[: between.index(eos) + len(eos)], tokenizer.eos_token_id
    return "", tokenizer.eos_token_id


def _thought(tokenizer: Any, system: str, kwargs: dict[str, Any]) -> Thought:
    off = _render(tokenizer, _history(system), {**kwargs, "enable_thinking": False})
    on = _render(tokenizer, _history(system), kwargs)
    if on == off:
        raise ChatTemplateError("prompt.thinking: this model's chat template has no thinking mode (it renders the "
                                "same with enable_thinking on and off)")
    for open_, close in THOUGHT_MARKERS:
        ids = tokenizer.encode(close, add_special_tokens=False)
        if len(ids) == 1:
            # a template whose generation prompt opens the thought itself (some Qwen3 thinking templates end with
            # "<think>\n"): the environment must not open it a second time
            opened = on.endswith(open_) or on.endswith(open_.rstrip("\n"))
            return Thought("" if opened else open_, close, ids[0])
    raise ChatTemplateError(f"prompt.thinking: none of the thought markers {[c for _, c in THOUGHT_MARKERS]} is "
                            "one token of this tokenizer's vocabulary")
