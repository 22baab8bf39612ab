"""Everything that runs a job, in step order.

    session.py      `open_session` (machine checks, run lock, resume decision, warm start) and `TrainSession`
    loop.py         the training loop (Algorithm 1), one screen: `train`, `train_step`
    scoring.py      `RewardScorer`, the scorer the step rule gets as a value
    report.py       step metrics, the histograms kept in the history, `summary.json`
    stall.py        the stall report and its one-line error
    signals.py      SIGTERM/SIGINT: finish the step, checkpoint, exit
    console.py      `say`, and the rollout layer's log lines routed to it
    checkpoint/     atomic checkpoints and the resume decision
    lock.py         one process per run folder
    samples_log.py  samples.jsonl
    sft.py, sft_report.py   `ulorl sft`: the supervised warm start and its held-out report
    sft_state.py    the SFT's saved state: an interrupted SFT continues from it
    show.py, plot.py        `ulorl show` and `ulorl plot`: reading a run folder
    export.py       the final checkpoint as a plain Hugging Face folder

Nothing below this package (rollout, plan, learners, ...) imports from it (tests/test_layers.py).
"""
