"""Kernel helpers shared by the rollout engine and the learner (a leaf: torch only, nothing else of ulorl).

`varlen`: torch's variable-length attention kernel (`varlen_attn`), for the engine's packed prefill and the
learner's packed micro-batches.
"""
