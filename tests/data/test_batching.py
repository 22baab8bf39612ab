"""`bucket_batches`: rows grouped by length under a token budget, by hand."""

from ulorl.data.batching import bucket_batches


def test_rows_are_grouped_shortest_first_under_the_budget_padding_included():
    lengths = [5, 2, 9, 3, 3, 20, 4]
    # sorted: 1 (2), 3 (3), 4 (3), 6 (4), 0 (5), 2 (9), 5 (20); a batch pads to its last (longest) row
    assert bucket_batches(lengths, token_budget=16, max_seqs=10) == [[1, 3, 4, 6], [0], [2], [5]]  # 4 x 4 <= 16
    assert bucket_batches(lengths, token_budget=12, max_seqs=10) == [[1, 3, 4], [6, 0], [2], [5]]  # 4 x 4 > 12
    assert bucket_batches(lengths, token_budget=100, max_seqs=3) == [[1, 3, 4], [6, 0, 2], [5]]
    assert bucket_batches([7], token_budget=3, max_seqs=1) == [[0]]  # a row over the budget goes alone
    assert bucket_batches([], token_budget=3, max_seqs=1) == []
