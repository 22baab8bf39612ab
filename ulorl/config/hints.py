"""Hints for an unknown config key: close spellings ("did you mean") and the ulorl name of verl's and TRL's keys.

verl users write `data.train_files=...` or `actor_rollout_ref.rollout.n=8` from habit. `VERL_KEYS`
maps verl's well-known keys (its `ppo_trainer.yaml` and DAPO recipe) to the ulorl key that does the
same job, or to a short note when ulorl has no such knob. docs/data.md renders the same table.
"""

from __future__ import annotations

import difflib

# verl key -> ulorl equivalent (a dotted key, a CLI flag, or a note starting with "none")
VERL_KEYS: dict[str, str] = {
    "data.train_files": "data.train (a path or a list of paths)",
    "data.val_files": "data.eval (a path or a list of paths)",
    "data.prompt_key": "data.prompt_key",
    "data.reward_fn_key": "data.data_source_key",
    "data.max_prompt_length": "data.max_prompt_len",
    "data.max_response_length": "rollout.max_response_len",
    "data.train_batch_size": "train.train_groups (prompts, i.e. whole groups, per update)",
    "data.shuffle": "data.shuffle",
    "data.seed": "data.seed",
    "data.filter_overlong_prompts": "none: prompts longer than data.max_prompt_len are always dropped and counted",
    "data.apply_chat_template_kwargs": "data.chat_template_kwargs",
    "actor_rollout_ref.model.path": "model.path",
    "actor_rollout_ref.model.trust_remote_code": "model.trust_remote_code",
    "actor_rollout_ref.model.enable_gradient_checkpointing": "model.gradient_checkpointing",
    "actor_rollout_ref.model.enable_activation_offload": "model.activation_offload",
    "actor_rollout_ref.model.use_remove_padding": "train.packing (samples packed into rows, no padding)",
    "actor_rollout_ref.model.lora_rank": "model.lora.rank (0: full fine-tuning)",
    "actor_rollout_ref.model.lora_alpha": "model.lora.alpha",
    "actor_rollout_ref.model.target_modules": "model.lora.target_modules (a list of module names)",
    "actor_rollout_ref.actor.optim.lr": "train.lr",
    "actor_rollout_ref.actor.optim.weight_decay": "train.weight_decay",
    "actor_rollout_ref.actor.grad_clip": "train.grad_clip",
    "actor_rollout_ref.actor.clip_ratio": "algo.eps_low and algo.eps_high",
    "actor_rollout_ref.actor.clip_ratio_low": "algo.eps_low",
    "actor_rollout_ref.actor.clip_ratio_high": "algo.eps_high",
    "actor_rollout_ref.actor.loss_agg_mode": "algo.loss_agg",
    "actor_rollout_ref.actor.ppo_mini_batch_size": "none: one update per step on train.train_groups groups",
    "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu": "train.micro_batch_tokens (tokens per micro-batch)",
    "actor_rollout_ref.actor.ulysses_sequence_parallel_size": "train.sequence_parallel",
    "actor_rollout_ref.actor.ppo_max_token_len_per_gpu": "train.micro_batch_tokens",
    "actor_rollout_ref.actor.use_dynamic_bsz": "none: micro-batches are always sized by tokens",
    "actor_rollout_ref.actor.entropy_coeff": "none: entropy is held by algo.entropy_mask=dmmpt and algo.sigma",
    "actor_rollout_ref.actor.use_kl_loss": "none: no KL term (DAPO recipe)",
    "actor_rollout_ref.rollout.n": "rollout.group_size",
    "actor_rollout_ref.rollout.name": "rollout.engine",
    "actor_rollout_ref.rollout.temperature": "rollout.temperature",
    "actor_rollout_ref.rollout.top_p": "rollout.top_p",
    "actor_rollout_ref.rollout.top_k": "rollout.top_k",
    "actor_rollout_ref.rollout.response_length": "rollout.max_response_len",
    "actor_rollout_ref.rollout.gpu_memory_utilization": "rollout.vllm.gpu_memory_utilization",
    "actor_rollout_ref.rollout.tensor_model_parallel_size": "rollout.vllm.tensor_parallel_size",
    "actor_rollout_ref.rollout.enforce_eager": "rollout.vllm.enforce_eager",
    "actor_rollout_ref.rollout.free_cache_engine": "rollout.vllm.enable_sleep_mode",
    "actor_rollout_ref.rollout.max_num_seqs": "rollout.vllm.max_num_seqs",
    "actor_rollout_ref.rollout.val_kwargs.n": "eval.k",
    "actor_rollout_ref.rollout.val_kwargs.temperature": "eval.temperature",
    "actor_rollout_ref.rollout.val_kwargs.top_p": "eval.top_p",
    "actor_rollout_ref.rollout.val_kwargs.top_k": "eval.top_k",
    "algorithm.adv_estimator": "none: GRPO group normalisation only",
    "algorithm.norm_adv_by_std_in_grpo": "algo.norm_adv_by_std",
    "algorithm.use_kl_in_reward": "none: no KL term",
    "algorithm.filter_groups.enable": "algo.dynamic_sampling",
    "algorithm.filter_groups.max_num_gen_batches": "train.max_rounds_per_step (rollout rounds, not batches)",
    "reward_model.overlong_buffer.enable": "reward.overlong=soft_penalty",
    "reward_model.overlong_buffer.len": "reward.overlong_buffer",
    "custom_reward_function.path": "reward.fn=PATH.py:NAME (path and function in one value)",
    "custom_reward_function.name": "reward.fn=PATH.py:NAME (path and function in one value)",
    "trainer.total_training_steps": "train.steps",
    "trainer.total_epochs": "train.steps (ulorl counts updates; the data wraps around)",
    "trainer.test_freq": "train.eval_every",
    "trainer.save_freq": "checkpoint.every",
    "trainer.max_actor_ckpt_to_keep": "checkpoint.keep",
    "trainer.logger": "logging.loggers",
    "trainer.project_name": "logging.wandb_project",
    "trainer.default_local_dir": "the --output-dir option",
    "trainer.resume_mode": "the --resume auto|PATH option",
    "trainer.val_before_train": "none: held-out accuracy is measured before training whenever data.eval is set",
    "trainer.n_gpus_per_node": "distributed.learner_procs and distributed.num_engines (distributed.backend=ray)",
    "trainer.device": "train.device",
}


# TRL's LoRA arguments (`ModelConfig`: --use_peft --lora_r ...) and peft's own `LoraConfig` names, wherever they
# are written (`lora_r=8`, `model.lora_r=8`, `model.lora.r=8`) -> the ulorl key
TRL_KEYS: dict[str, str] = {
    "use_peft": "model.lora.rank > 0 (0: full fine-tuning)",
    "lora_r": "model.lora.rank",
    "lora_alpha": "model.lora.alpha",
    "lora_dropout": "model.lora.dropout",
    "lora_target_modules": "model.lora.target_modules",
}
PEFT_LORA_KEYS: dict[str, str] = {"model.lora.r": "model.lora.rank", "model.lora.lora_alpha": "model.lora.alpha",
                                  "model.lora.lora_dropout": "model.lora.dropout"}


_VERL_SECTIONS = {p.split(".")[0] for p in VERL_KEYS} - {"data"} | {"critic", "ray_init"}


def _leaves(value, path: str) -> list[str]:
    """Dotted paths of the leaves under `value` (`value` itself when it is not a mapping)."""
    if isinstance(value, dict) and value:
        return [leaf for k, v in value.items() for leaf in _leaves(v, f"{path}.{k}")]
    return [path]


def unknown_key_hint(prefix: str, key: str, value, valid: list[str]) -> str:
    """Text to append to 'unknown config key PREFIX+KEY': verl equivalents, else close spellings, else ''.

    `value` is what was given under the key (a nested mapping for `actor_rollout_ref: {...}`), so a
    verl key is recognised whether it came as one dotted override or as nested YAML."""
    full = f"{prefix}{key}"
    verl = [(p, VERL_KEYS[p]) for p in [full, *_leaves(value, full)] if p in VERL_KEYS]
    if verl:
        return " (" + "; ".join(f"verl's {p} is {eq} in ulorl" for p, eq in dict(verl).items()) + ")"
    if full in PEFT_LORA_KEYS:
        return f" (peft's {full.rsplit('.', 1)[1]} is {PEFT_LORA_KEYS[full]} in ulorl)"
    if full.rsplit(".", 1)[-1] in TRL_KEYS:
        leaf = full.rsplit(".", 1)[-1]
        return f" (TRL's {leaf} is {TRL_KEYS[leaf]} in ulorl)"
    if full.split(".")[0] in _VERL_SECTIONS:
        return " (a verl key: see the verl -> ulorl key table in docs/data.md)"
    close = difflib.get_close_matches(key, valid, n=3, cutoff=0.6)
    return f" (did you mean {' or '.join(prefix + c for c in close)}?)" if close else ""
