"""Unit tier settings: Hypothesis profiles.

``HYPOTHESIS_PROFILE`` picks the profile; without it, ``ci`` when the ``CI`` environment
variable is set (GitHub Actions and most CI systems set it) and ``dev`` otherwise.

- ``dev``: a quick local run (a few hundred simulated runs in all).
- ``ci``: thousands of generated runs (the pure-Python unit tier: about ten minutes on
  two cores), derandomized and not shrunk. Derandomized: the same examples every run
  (per test function), so that a CI verdict is reproducible and says something about
  the change, not about the draw; new examples are explored outside CI (the ``deep``
  profile, or any run of the other profiles, whose draws are random), and what they
  find becomes a seeded test. Not shrunk: a failure prints the example found and its
  blob for ``@reproduce_failure``, and a developer shrinks it locally (the dev profile
  does); on 2026-11-29 a slow failing example (a 200,000-step run) took CI's shrinker
  45 minutes.
- ``deep``: a long soak (``HYPOTHESIS_PROFILE=deep``), for before a release.

Property tests scale their example counts from ``settings().max_examples`` (see
``tests/unit/test_properties.py``), so one knob sizes the tier.
"""

from __future__ import annotations

import os

from hypothesis import HealthCheck, Phase, settings

# Simulated runs vary in length (their time is bounded by the sizes drawn), so no
# deadline; failures print a blob to reproduce them with @reproduce_failure.
settings.register_profile(
    "base",
    deadline=None,
    suppress_health_check=(HealthCheck.too_slow, HealthCheck.data_too_large),
    print_blob=True,
)
settings.register_profile("dev", settings.get_profile("base"), max_examples=60)
settings.register_profile(
    "ci",
    settings.get_profile("base"),
    max_examples=500,
    database=None,  # CI machines start clean
    derandomize=True,
    phases=(Phase.explicit, Phase.reuse, Phase.generate, Phase.target, Phase.explain),
)
settings.register_profile("deep", settings.get_profile("base"), max_examples=5000)
settings.load_profile(
    os.environ.get("HYPOTHESIS_PROFILE") or ("ci" if os.environ.get("CI") else "dev")
)
