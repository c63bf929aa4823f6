"""Predictor throughput: texts scored per second and update steps per second for each backbone.

Usage:
    .venv/bin/python benchmarks/predictor.py [--backbones tiny,minilm] [--hf-path DIR] [--threads N]

Texts are serialized anchors of the tiny policy's arithmetic tool-use task (a prompt plus 0-3 turns, about
60-400 characters). Prints medians over ``--repeats`` timed runs after one warm-up, and the predictor's share
of a training step for the workload given by --pool/--anchors/--updates and --step-seconds /
--smollm-step-seconds (ESTIMATES: the trainer does not exist yet; the default step times are derived in
docs/benchmarks.md from the measured policy speeds in RESOURCES.md).
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np
import torch

from trace_rl.predictor import build_predictor, serialize_anchor
from trace_rl.types import Turn


def anchor_texts(n: int, seed: int = 0) -> list[str]:
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        k = int(rng.integers(2, 8))
        expr = " + ".join(str(int(rng.integers(1, 1000))) for _ in range(k))
        turns = [
            Turn(
                text=f'<tool_call>{{"name": "python", "arguments": {{"code": "print({expr})"}}}}</tool_call>',
                observation=str(int(rng.integers(1, 10_000))),
            )
            for _ in range(int(rng.integers(0, 4)))
        ]
        out.append(serialize_anchor(f"What is {expr}? Use the python tool, then answer.", turns))
    return out


def bench(name: str, args: argparse.Namespace) -> dict[str, float]:
    start = time.perf_counter()
    pred = build_predictor(name, device=args.device)
    build_s = time.perf_counter() - start
    texts = anchor_texts(args.texts)
    train = anchor_texts(args.batch, seed=1)
    y = np.linspace(0.0, 1.0, args.batch)
    pred.predict(texts[: args.batch])  # warm-up
    pred.update(train, y)
    score, upd = [], []
    for _ in range(args.repeats):
        t = time.perf_counter()
        pred.predict(texts)
        score.append(time.perf_counter() - t)
        t = time.perf_counter()
        pred.update(train, y)
        upd.append(time.perf_counter() - t)
    texts_per_s = args.texts / statistics.median(score)
    updates_per_s = 1.0 / statistics.median(upd)
    step_s = (args.pool + args.anchors) / texts_per_s + args.updates / updates_per_s
    return {
        "build_s": build_s,
        "params_M": sum(p.numel() for p in pred.backbone.parameters()) / 1e6,  # type: ignore[attr-defined]
        "texts_per_s": texts_per_s,
        "updates_per_s": updates_per_s,
        "predictor_s_per_step": step_s,
        "share_of_step": step_s / args.step_seconds,
        "share_of_smollm_step": step_s / args.smollm_step_seconds,
    }


def tiny_policy_step_seconds(args: argparse.Namespace) -> tuple[float, float, float]:
    """Measure the tiny Qwen3 policy of RESOURCES.md (3.2 M parameters) here, now, under the same load.

    Returns (sampled tokens/s at batch 64, trained tokens/s for fwd+bwd+AdamW on 8 x 256 tokens, step seconds for
    ``--episodes`` episodes of ``--sampled-tokens`` sampled and ``--trained-tokens`` trained tokens each).
    """
    from transformers import Qwen3Config, Qwen3ForCausalLM

    torch.manual_seed(0)
    config = Qwen3Config(
        vocab_size=512,
        hidden_size=256,
        intermediate_size=768,
        num_hidden_layers=4,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=64,
        tie_word_embeddings=True,
        max_position_embeddings=1024,
    )
    model = Qwen3ForCausalLM(config)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    ids = torch.randint(0, 512, (8, 256))
    train = []
    for i in range(4):
        t = time.perf_counter()
        model(input_ids=ids, labels=ids).loss.backward()
        opt.step()
        opt.zero_grad()
        if i:  # first iteration is warm-up
            train.append(time.perf_counter() - t)
    train_tps = ids.numel() / statistics.median(train)
    model.eval()
    prompt = torch.randint(0, 512, (64, 64))
    t = time.perf_counter()
    with torch.inference_mode():
        model.generate(prompt, max_new_tokens=64, min_new_tokens=64, do_sample=True, pad_token_id=0)
    sample_tps = 64 * 64 / (time.perf_counter() - t)
    step = args.episodes * (args.sampled_tokens / sample_tps + args.trained_tokens / train_tps)
    return sample_tps, train_tps, step


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backbones", default="tiny,minilm")
    parser.add_argument("--hf-path", default=None, help="also benchmark a local Hugging Face model folder")
    parser.add_argument("--threads", type=int, default=0, help="torch intra-op threads (0 = torch default)")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--texts", type=int, default=256, help="texts per scoring run")
    parser.add_argument("--batch", type=int, default=32, help="texts per update step")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--pool", type=int, default=256, help="candidate prompts scored per step")
    parser.add_argument("--anchors", type=int, default=256, help="prefix anchors scored per step")
    parser.add_argument("--updates", type=int, default=3, help="predictor updates per step")
    parser.add_argument("--step-seconds", type=float, default=41.0, help="wall-clock of one tiny-policy step")
    parser.add_argument(
        "--smollm-step-seconds", type=float, default=2500.0, help="wall-clock of one SmolLM2-135M policy step"
    )
    parser.add_argument(
        "--measure-policy", action="store_true", help="time the tiny policy here for the share"
    )
    parser.add_argument("--episodes", type=int, default=768, help="episodes per step (roots + replays)")
    parser.add_argument("--sampled-tokens", type=int, default=100, help="sampled tokens per episode")
    parser.add_argument("--trained-tokens", type=int, default=150, help="trained tokens per episode")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    if args.measure_policy:
        sample_tps, train_tps, args.step_seconds = tiny_policy_step_seconds(args)
        print(
            f"tiny policy measured here: {sample_tps:.0f} sampled tokens/s (batch 64), {train_tps:.0f} trained "
            f"tokens/s; step of {args.episodes} episodes = {args.step_seconds:.1f} s"
        )
    names = [b for b in args.backbones.split(",") if b] + ([args.hf_path] if args.hf_path else [])
    print(f"torch {torch.__version__}, threads {torch.get_num_threads()}, device {args.device}")
    print(
        f"workload per step: score {args.pool} prompts + {args.anchors} anchors, {args.updates} updates of "
        f"{args.batch}; step wall-clock (estimates) tiny policy {args.step_seconds:.0f} s, SmolLM2 policy "
        f"{args.smollm_step_seconds:.0f} s"
    )
    for name in names:
        r = bench(name, args)
        print(
            f"{name:>8}: {r['params_M']:.2f} M params, build {r['build_s']:.1f} s, "
            f"{r['texts_per_s']:.0f} texts/s scored, {r['updates_per_s']:.2f} updates/s (batch {args.batch}), "
            f"predictor {r['predictor_s_per_step']:.2f} s/step = {100 * r['share_of_step']:.1f}% of a tiny-policy "
            f"step, {100 * r['share_of_smollm_step']:.1f}% of a SmolLM2 step"
        )


if __name__ == "__main__":
    main()
