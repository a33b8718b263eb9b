"""The PySpark metrics job, for ``spark-submit`` from a source checkout.

The job lives in the package, ``atomickafka/evaluation/suite/metrics_job.py`` (so an installed
``atomickafka eval`` finds it; ``atomickafka eval --print-job`` prints its path). This
script only runs that file, which needs nothing but pyspark::

    spark-submit eval/metrics.py --runs eval/out/<time>/runs --out DIR [--master URL]
"""

from __future__ import annotations

import runpy
from pathlib import Path

JOB = (
    Path(__file__).resolve().parents[1] / "atomickafka" / "evaluation" / "suite" / "metrics_job.py"
)

if __name__ == "__main__":
    runpy.run_path(str(JOB), run_name="__main__")
