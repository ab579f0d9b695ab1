"""The GRPO update projects through the vocabulary only the tokens its loss reads: the seller's sampled tokens.

TRL's GRPO loss, its entropy and its clip metrics read the policy's per-token log-probabilities under one mask,
``completion_mask * env_mask``: the seller's own sampled tokens, never the prompt, the buyer's turns relayed in
between, or padding. TRL computes them with a fused LM head (``trl.trainer.utils.add_fused_lm_head``) that, on
devices without Triton (every CPU), projects *every* position of the micro-batch through the vocabulary, the prompt
included, forward and backward. In the demo recipe that is 2 rows x 757 positions, of which about 60 are the
seller's, through SmolLM2's 49,152 words: 43% of the update's time (a torch profile of one micro-batch: 6.7 of
15.6 s). With Triton (CUDA) TRL keeps the completion's tokens, buyer turns included.

``LossTokenGRPOTrainer`` hands each micro-batch's loss mask to the model's forward while TRL computes the loss;
the forward then projects only those positions, with TRL's own public kernel (``trl.kernels.ChunkedLogProbFunction``)
and so the same arithmetic. The loss, the gradient and TRL's metrics are unchanged (``tests/test_loss_tokens.py``);
the positions left out get a log-probability and entropy of 0, which TRL's masked sums never read.

TRL's forward stays in charge where this one would not compute the same: heads that scale their logits in ways
it does not repeat (it repeats Gemma's soft cap and ``logit_scale``), mixture-of-experts models (TRL's forward adds
their router loss), sharded heads (FSDP, DeepSpeed ZeRO-3: TRL's forward gathers them) and
``cast_lm_head_to_fp32``. Log-probabilities TRL computed itself (old ones, the reference model's) are set to 0
outside the mask too, so that no ratio of the two overflows where the loss does not look.
"""

from __future__ import annotations

import functools
import logging
import types
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

import torch
from accelerate.utils import DistributedType, is_peft_model
from trl import GRPOTrainer
from trl.kernels import ChunkedLogProbFunction
from trl.trainer.utils import FusedCausalLMOutput

log = logging.getLogger(__name__)

# Vocabulary columns per projection tile: all of SmolLM2's 49,152 in two tiles (TRL's own width).
VOCAB_CHUNK = 32768
# Text-config fields by which some heads rescale their logits; TRL's head repeats them, this one does not.
OTHER_SCALES = ("output_multiplier", "lm_head_multiplier", "logits_scaling")
# Per-token log-probabilities TRL computes itself with its own head (rows x completion tokens), next to the loss's.
TRL_LOG_PROBS = ("old_per_token_logps", "ref_per_token_logps", "sampling_per_token_logps")

# The micro-batch's loss mask (rows x completion tokens) while TRL computes its loss; None otherwise, so a forward
# with the fused head outside the loss (old or reference log-probabilities) takes TRL's path.
_LOSS_MASK: ContextVar[torch.Tensor | None] = ContextVar("haggler_loss_mask", default=None)


@contextmanager
def loss_mask(mask: torch.Tensor) -> Iterator[None]:
    token = _LOSS_MASK.set(mask)
    try:
        yield
    finally:
        _LOSS_MASK.reset(token)


def why_not_compact(config: Any) -> str | None:
    """Why this model's head keeps TRL's forward; None where the compact one computes the same."""
    text = config.get_text_config()
    # MoE configs carry the field even when it is False: TRL asks for the router loss whenever its coefficient is set
    if getattr(text, "output_router_logits", None) is not None:
        return "a mixture of experts (TRL's forward adds the router loss)"
    scales = [name for name in OTHER_SCALES if getattr(text, name, None) not in (None, 1, 1.0)]
    if scales:
        return f"its head rescales logits by {', '.join(scales)}"
    return None


def score_loss_tokens_only(model: Any, temperature: float) -> bool:
    """Wrap ``model``'s forward (the one TRL gave a fused head, the PEFT base where there is one) so that, inside
    ``loss_mask``, the fused head projects only the masked completion positions. False where it keeps TRL's."""
    reason = why_not_compact(model.config)
    if reason is not None:
        log.info("the update projects every position through the vocabulary (TRL's head): %s", reason)
        return False
    text = model.config.get_text_config()
    softcap = getattr(text, "final_logit_softcapping", None)
    scale = getattr(text, "logit_scale", None)
    scale = 1.0 if scale is None else float(scale)
    trl_forward = model.forward

    @functools.wraps(type(model).forward)  # generate() reads the forward's signature for its model kwargs
    def forward(self: Any, *args: Any, fused_lm_head: bool = False, labels: torch.Tensor | None = None,
                **kwargs: Any) -> Any:
        mask = _LOSS_MASK.get()
        if (not fused_lm_head or mask is None or labels is None or "shift_labels" in kwargs
                or kwargs.get("output_router_logits") or mask.shape[0] != labels.shape[0]
                or mask.shape[1] >= labels.shape[1]):
            return trl_forward(*args, fused_lm_head=fused_lm_head, labels=labels, **kwargs)
        kwargs.pop("num_items_in_batch", None)
        kwargs["use_cache"] = False
        hidden = self.base_model(*args, **kwargs).last_hidden_state[:, :-1]  # position i predicts token i + 1
        targets = labels[:, 1:]
        scored = torch.zeros_like(targets, dtype=torch.bool)
        scored[:, -mask.shape[1]:] = mask.to(torch.bool)  # the completion is the sequence's last tokens
        scored &= targets != -100
        head = self.get_output_embeddings()
        hidden, targets, scored = (t.to(head.weight.device) for t in (hidden, targets, scored))  # device_map
        logps, entropy, *_ = ChunkedLogProbFunction.apply(
            hidden[scored], head.weight, head.bias, targets[scored], temperature, VOCAB_CHUNK, softcap, scale,
            ("entropy",))
        # masked_scatter keeps the outputs connected to the model even when a micro-batch scores no token
        log_probs = logps.new_zeros(scored.shape).masked_scatter(scored, logps)
        entropies = entropy.new_zeros(scored.shape).masked_scatter(scored, entropy)
        loss = -log_probs.sum() / scored.sum().clamp(min=1)
        return FusedCausalLMOutput(loss=loss, log_probs=log_probs, entropy=entropies, label_mask=scored)

    model.forward = types.MethodType(forward, model)
    return True


class LossTokenGRPOTrainer(GRPOTrainer):
    """TRL's ``GRPOTrainer`` whose update projects only the loss's tokens through the vocabulary (module doc)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        model = self.model.get_base_model() if is_peft_model(self.model) else self.model  # where TRL put its head
        self.compact_head = False
        if self.accelerator.distributed_type not in (DistributedType.NO, DistributedType.MULTI_CPU):
            # sharded heads (FSDP's DTensors, ZeRO-3's partitions) are gathered by TRL's forward, not by this one
            log.info("the update keeps TRL's LM head under %s", self.accelerator.distributed_type)
        elif self.args.cast_lm_head_to_fp32:
            log.info("the update keeps TRL's LM head: cast_lm_head_to_fp32 is its option")
        else:
            self.compact_head = score_loss_tokens_only(model, self.args.temperature)

    def compute_loss(self, model: Any, inputs: dict[str, Any], return_outputs: bool = False,
                     num_items_in_batch: Any = None) -> Any:
        if not self.compact_head:
            return super().compute_loss(model, inputs, return_outputs, num_items_in_batch)
        mask = inputs["completion_mask"]
        if inputs.get("tool_mask") is not None:  # TRL's name for the rollout's env_mask
            mask = mask * inputs["tool_mask"]
        # Log-probabilities TRL computed itself (old ones with several iterations or vLLM, the reference model's) are
        # set to the compact head's 0 outside the mask: the loss never reads them there, and exp(0 - old) could
        # overflow to inf where a token was very unlikely, and inf * 0 is NaN.
        on = mask.bool()
        inputs = {k: torch.where(on, v, 0.0) if k in TRL_LOG_PROBS and torch.is_tensor(v) else v
                  for k, v in inputs.items()}
        with loss_mask(mask):
            return super().compute_loss(model, inputs, return_outputs, num_items_in_batch)
