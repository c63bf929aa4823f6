"""The policy's own hidden state at an anchor's save point, as a feature block of the convex predictor.

Why (issue 23, item 1): the text of a prefix says little about whether the agent's state can still go either way
(prefix Spearman 0.1-0.4 per step with n-grams of the text and the prompt's MiniLM embedding). The policy that
generated the prefix has read exactly that context and is about to act on it; its last-layer hidden state at the
save point (the last token of the context a replay resumes from, i.e. the next assistant header) is what its next
turn is computed from. Using the policy as a frozen critic backbone (no gradient into it, one forward pass per
batch of anchors) under the convex head of :mod:`trace_rl.predictor.convex` is the cheapest way to let the
predictor see the state; the paper's own choice is a separate Qwen3-0.6B critic reading the history
(arXiv 2606.11119, section on the shared predictor), which a local Hugging Face folder gives today.

The predictor reads strings; a hidden state needs the token context. :class:`PolicyStateEncoder` therefore keeps
a registry ``text -> token ids`` that whoever serializes an anchor fills (:meth:`PolicyStateEncoder.register`:
the trainer registers every prompt, anchor and tree node it scores or trains on, with the token ids it sampled
from), and maps texts to features with the *current* weights of the policy module it holds (the live policy
object: the feature tracks the policy as it trains, which is the point of a state-aware feature). A text without
a registered context is an error, never a silent fallback.

Features per text (float64, 2 H): the last-layer hidden state of the context's last token, then the mean over
the context's tokens (``pooling="last+mean"``; ``"last"`` or ``"mean"`` alone give H); the convex predictor divides
each row by its L2 norm (a hidden state's scale says nothing about success, and a unit row weighs like a
median n-gram row under the same ``c``). Contexts longer than
``max_tokens`` keep their first ``max_tokens // 4`` and last ``max_tokens - max_tokens // 4`` ids
(:func:`trace_rl.predictor.serialize.clip_token_ids`).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from trace_rl.predictor.serialize import clip_token_ids

POOLINGS = ("last", "mean", "last+mean")


class PolicyStateEncoder:
    """``texts -> float64 (n, F)``: the policy's last-layer hidden state at each text's registered token context.

    Args:
        model: a causal LM (``transformers`` ``PreTrainedModel``; its ``base_model``, the decoder without the LM
            head, is called with ``input_ids`` and ``attention_mask`` and must return ``last_hidden_state``, after
            the final norm); held by reference, so its current weights are used at every call.
        pad_id: token id used for right padding (masked out; never attended to by the real tokens).
        pooling: "last" (H), "mean" (H) or "last+mean" (2 H, the default).
        max_tokens: longest context fed to the model (>= 8); longer ones keep head and tail.
        batch: contexts per forward pass (>= 1).
        capacity: registered contexts kept (least recently registered or used dropped first, >= 1).

    Raises:
        ValueError: an unknown pooling or a bound below its minimum.
    """

    def __init__(
        self,
        model: Any,
        *,
        pad_id: int = 0,
        pooling: str = "last+mean",
        max_tokens: int = 1024,
        batch: int = 32,
        capacity: int = 200_000,
    ) -> None:
        if pooling not in POOLINGS:
            raise ValueError(f"pooling must be one of {', '.join(POOLINGS)}; got {pooling!r}")
        if max_tokens < 8 or batch < 1 or capacity < 1:
            raise ValueError(
                f"need max_tokens >= 8, batch >= 1, capacity >= 1; got {max_tokens}, {batch}, {capacity}"
            )
        self.model = model
        self.pad_id = int(pad_id)
        self.pooling = pooling
        self.max_tokens = int(max_tokens)
        self.batch = int(batch)
        self.capacity = int(capacity)
        self._contexts: OrderedDict[str, npt.NDArray[np.int64]] = OrderedDict()

    @property
    def width(self) -> int:
        """F, the feature width: H or 2 H with H the model's hidden size."""
        hidden = int(self.model.config.hidden_size)
        return 2 * hidden if self.pooling == "last+mean" else hidden

    def register(self, texts: Sequence[str], token_ids: Sequence[npt.ArrayLike]) -> None:
        """Remember the token context (int ids (T_i,), T_i >= 1) each predictor text stands for.

        Raises:
            ValueError: lengths differ, or a context is empty or not one-dimensional.
        """
        if len(texts) != len(token_ids):
            raise ValueError(f"{len(texts)} texts but {len(token_ids)} token contexts")
        for text, ids in zip(texts, token_ids, strict=True):
            arr = np.asarray(ids, dtype=np.int64)
            if arr.ndim != 1 or arr.size == 0:
                raise ValueError(f"a token context must be a non-empty 1-d id array; got shape {arr.shape}")
            self._contexts[text] = arr
            self._contexts.move_to_end(text)
        while len(self._contexts) > self.capacity:
            self._contexts.popitem(last=False)

    def context(self, text: str) -> npt.NDArray[np.int64]:
        """The registered token ids of ``text``.

        Raises:
            ValueError: none registered (the caller must :meth:`register` the contexts it scores).
        """
        ids = self._contexts.get(text)
        if ids is None:
            raise ValueError(
                "no token context registered for predictor text "
                f"{text[:60]!r}...: a state-aware predictor needs PolicyStateEncoder.register(texts, token_ids) "
                "before it scores or trains on a text"
            )
        self._contexts.move_to_end(text)
        return ids

    def __call__(self, texts: Sequence[str]) -> npt.NDArray[np.float64]:
        """Features float64 (n, F) of ``texts`` under the model's current weights (inference mode, no grad)."""
        import torch

        from trace_rl.predictor.backbones import last_token, masked_mean

        contexts = [
            clip_token_ids(self.context(t).tolist(), self.max_tokens, self.max_tokens // 4) for t in texts
        ]
        out = np.zeros((len(texts), self.width), dtype=np.float64)
        if not contexts:
            return out
        param = next(self.model.parameters())
        decoder = getattr(self.model, "base_model", self.model)
        order = np.argsort([len(c) for c in contexts], kind="stable")  # similar lengths share a batch
        was_training = bool(self.model.training)
        self.model.eval()
        try:
            with torch.inference_mode():
                for lo in range(0, len(order), self.batch):
                    rows = order[lo : lo + self.batch]
                    length = max(len(contexts[i]) for i in rows)
                    ids = torch.full((len(rows), length), self.pad_id, dtype=torch.long)
                    mask = torch.zeros((len(rows), length), dtype=torch.long)
                    for r, i in enumerate(rows):
                        ids[r, : len(contexts[i])] = torch.as_tensor(contexts[i])
                        mask[r, : len(contexts[i])] = 1
                    ids, mask = ids.to(param.device), mask.to(param.device)
                    # the decoder without its LM head (``base_model``: Qwen3Model inside Qwen3ForCausalLM)
                    h = decoder(input_ids=ids, attention_mask=mask).last_hidden_state.float()  # (B, L, H)
                    last, mean = last_token(h, mask.bool()), masked_mean(h, mask.bool())
                    parts = {"last": [last], "mean": [mean], "last+mean": [last, mean]}[self.pooling]
                    out[rows] = torch.cat(parts, dim=1).cpu().double().numpy()
        finally:
            self.model.train(was_training)
        return out


def node_contexts(
    tree: Any, prompt: str, prompt_ids: npt.ArrayLike, *, max_chars: int
) -> tuple[list[str], list[npt.NDArray[np.int64]]]:
    """The predictor text and token context of every non-leaf node of a rollout tree (node order, root first).

    A node's context is the prompt's ids followed by the ids of every turn from the root down to it (what a replay
    from it resumes from: `trace_rl.rollout.agent.SavePoint.token_ids`); its text is
    ``serialize_anchor(prompt, those turns, max_chars=max_chars)``, the text the trainer scores and trains on.

    Args:
        tree: a ``RolloutTree`` (``parent``, ``turns``, ``path_to``). prompt: the task prompt.
        prompt_ids: int (P,) the rollouts' starting context (``Episode.prompt_ids`` of a root rollout).
        max_chars: serialization budget (the predictor's ``max_chars``).

    Raises:
        ValueError: a non-root node on a path has no turn payload.
    """
    from trace_rl.predictor.serialize import serialize_anchor

    parent = np.asarray(tree.parent, dtype=np.int64)
    has_child = np.zeros(len(parent), dtype=bool)
    has_child[parent[parent >= 0]] = True
    base = np.asarray(prompt_ids, dtype=np.int64)
    texts: list[str] = []
    contexts: list[npt.NDArray[np.int64]] = []
    for node in np.flatnonzero(has_child):
        turns = [tree.turns[int(y)] for y in tree.path_to(int(node))[1:]]
        if any(t is None for t in turns):
            raise ValueError(f"node {int(node)} lies below a node without a turn payload")
        texts.append(serialize_anchor(prompt, turns, max_chars=max_chars))
        contexts.append(np.concatenate([base, *[np.asarray(t.token_ids, dtype=np.int64) for t in turns]]))
    return texts, contexts
