"""Rows of different lengths grouped into padded batches under a token budget (the SFT's batches, the exact
measure's forwards)."""

from __future__ import annotations


def bucket_batches(lengths: list[int], token_budget: int, max_seqs: int) -> list[list[int]]:
    """Indices grouped by similar length so that `len(batch) * max_len <= token_budget` (a row longer than the
    budget alone), at most `max_seqs` a batch; shortest first."""
    order = sorted(range(len(lengths)), key=lambda i: lengths[i])
    batches: list[list[int]] = [[]]
    for i in order:
        b = batches[-1]
        if b and ((len(b) + 1) * lengths[i] > token_budget or len(b) >= max_seqs):
            batches.append([i])
        else:
            b.append(i)
    return batches
