"""ulorl: reinforcement learning for language models with ultra-long answers (UloRL)."""

__version__ = "0.1.0"
