"""`algo:` importance sampling, entropy masking (DMMPTs), clipping, loss aggregation, dynamic sampling."""

from __future__ import annotations

from dataclasses import dataclass

from ulorl.algo.entropy_mask import EntropyMaskMode
from ulorl.algo.importance import ISMode
from ulorl.algo.loss import AggMode
from ulorl.config.checks import positive
from ulorl.config.loader import ConfigError, check_choice, check_field_types


@dataclass
class AlgoConfig:
    is_mode: str = "pois"  # tois | sais | pois | pois_tis | mask_stale
    entropy_mask: str = "dmmpt"  # none | mpt | dmmpt | dmmt (EntropyMaskMode; dmmt: not in the paper)
    tau: float = 0.99  # MPT probability threshold, in (0, 1)
    sigma: float = 0.2  # target entropy for DMMPTs, > 0
    eps_low: float = 0.2
    eps_high: float = 0.2  # clip-higher: 0.28
    loss_agg: str = "token-mean"
    dynamic_sampling: bool = True  # drop groups whose rewards are all equal
    norm_adv_by_std: bool = True
    tis_cap: float = 2.0  # pois_tis: truncation C of the stale-token weight
    max_stale: int = 1  # mask_stale: tokens older than this many versions give no gradient

    def __post_init__(self) -> None:
        check_field_types(self, "algo.")
        check_choice("algo.is_mode", self.is_mode, ISMode)
        check_choice("algo.entropy_mask", self.entropy_mask, EntropyMaskMode)
        check_choice("algo.loss_agg", self.loss_agg, AggMode)
        if not 0 < self.tau < 1:
            raise ConfigError(f"algo.tau={self.tau} must be in (0, 1)")
        positive("algo.sigma", self.sigma)
        if not 0 <= self.eps_low < 1:
            raise ConfigError(f"algo.eps_low={self.eps_low} must be in [0, 1)")
        positive("algo.eps_high", self.eps_high, allow_zero=True)
        if self.tis_cap < 1:
            raise ConfigError(f"algo.tis_cap={self.tis_cap} must be >= 1")
        positive("algo.max_stale", self.max_stale, allow_zero=True)
