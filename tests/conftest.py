"""Hypothesis profiles. `ci` (.ci/run passes `--hypothesis-profile ci`) draws the same examples on
every run, so a commit's CI result can be reproduced; everywhere else each run draws new ones,
which is how rare counterexamples turn up (run the suite a few times, or with
`--hypothesis-seed N`, after changing the simulator or the search)."""

from hypothesis import settings

settings.register_profile("ci", derandomize=True)
