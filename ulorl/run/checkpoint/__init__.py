"""Atomic checkpoints of everything a run needs to continue exactly.

    atomic.py   durable writes (fsync, replace-or-keep text, checksums, the run folder)
    state.py    the run state beside the weights (every RNG, the state keys, the save fingerprint)
    store.py    the layout, the save protocol below, the `latest` pointer, pruning
    find.py     finding, verifying and loading a checkpoint
    resume.py   the resume decision and the config changes a resume allows

Layout of one checkpoint `RUN/checkpoints/step_000012/`:
    model/            HF folder (safetensors) of the policy, plus its tokenizer; with LoRA, a peft adapter
                      folder instead (adapters, base config, tokenizer: `ulorl.models.lora.save_policy`)
    optimizer.pt      optimizer state (loaded with `weights_only=True`: no arbitrary unpickling)
    rng.pt            torch RNG states, CPU and CUDA (tensors only, `weights_only=True`)
    state.json        step, policy version, prompt cursor/epoch, rollout rounds, python/numpy RNG,
                      counters, history, the resolved config
    pools.json        unfinished pool and experience pool, every trajectory in full
    MANIFEST.json     size and sha256 of every file above; written last, inside the folder

Writing protocol (`save_checkpoint`):
  1. everything goes to `step_000012.tmp-<pid>/`; every file and folder is fsynced;
  2. MANIFEST.json is written and fsynced (a folder without a valid manifest is never loaded);
  3. the folder is renamed to `step_000012/` and the parent folder fsynced (re-saving the same
     step moves the old folder aside first, so one complete copy always exists);
  4. the `latest` pointer file is replaced atomically (write `latest.tmp-<pid>`, fsync, rename):
     a checkpoint is *committed* once `latest` names it;
  5. pruning: the last `keep` committed checkpoints stay; folders with a higher step than the one
     just saved belong to an abandoned timeline (the run was resumed from an older checkpoint) and
     are deleted, as are leftovers of interrupted saves.
A crash at any moment leaves the previous committed checkpoint intact. A failed write (a full disk)
removes the partial folder at once and raises `CheckpointError`; nothing committed is touched.

Finding one (`find_resumable`): the checkpoint `latest` names, when it verifies; otherwise the
newest verifying checkpoint not newer than the one `latest` names (all of them when there is no
pointer). Every skipped folder is reported with the reason. The pointer must hold the name of a
`step_NNNNNN` folder directly inside the checkpoints folder; anything else (a path out of the run,
binary bytes) is ignored with a note.

Deciding (`decide_resume`, the one call a run makes before it is built): what `--resume` (none, `never`,
`auto`, a PATH) means for a run folder: the checkpoint to resume from, loaded and checked against the
run's config, or a fresh start; plus the notes to print, or the error to stop with. `--resume auto` never
starts over when checkpoints exist but none verifies: it stops with the list (`existing_checkpoints`,
the notes). Once the state is restored, `commit_resumed` points `latest` at the checkpoint resumed from.

Test hook: `ULORL_TEST_CRASH_IN_SAVE=<phase>[@<step>]` makes `save_checkpoint` exit the process
at once (`os._exit(137)`, like SIGKILL) at one of the phases in `CRASH_PHASES`, for the step given
(any step without `@`). Used by tests/run/checkpoint/test_resume_kill.py; never set it otherwise.
"""

from ulorl.durable import atomic_write_text
from ulorl.run.checkpoint.atomic import make_run_dir
from ulorl.run.checkpoint.find import (check_run_state, existing_checkpoints, find_resumable, load_checkpoint,
                                      resolve_resume_path, verify_checkpoint)
from ulorl.run.checkpoint.resume import (ResumeDecision, commit_resumed, compare_configs, decide_resume,
                                        resume_command)
from ulorl.run.checkpoint.state import POOL_KEYS, STATE_KEYS, save_fingerprint, set_rng_state
from ulorl.run.checkpoint.store import (CHECKPOINTS, CRASH_HOOK_ENV, CRASH_PHASES, LATEST, MANIFEST, CheckpointError,
                                       incomplete_saves, read_latest, save_checkpoint, set_latest, step_dir, step_of)

__all__ = ["CHECKPOINTS", "CRASH_HOOK_ENV", "CRASH_PHASES", "LATEST", "MANIFEST", "POOL_KEYS", "STATE_KEYS",
           "CheckpointError", "ResumeDecision", "atomic_write_text", "check_run_state", "commit_resumed",
           "compare_configs", "decide_resume", "existing_checkpoints", "find_resumable", "incomplete_saves",
           "load_checkpoint", "make_run_dir", "read_latest", "resolve_resume_path", "resume_command",
           "save_checkpoint", "save_fingerprint", "set_latest", "set_rng_state", "step_dir", "step_of",
           "verify_checkpoint"]
