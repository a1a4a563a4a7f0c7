"""An HDF5 save to a bucket holds the model plus at most 64 MiB (upload buffers), measured in a fresh process."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

from tests._s3server import S3TestServer

_PROBE = textwrap.dedent('''
    import json, sys
    import numpy as np
    import varstore as vs

    def status(field):
        with open("/proc/self/status") as handle:
            return next(int(line.split()[1]) for line in handle if line.startswith(field + ":")) / 1024

    options = json.loads(sys.argv[2])
    arrays = {f"layer{i}/w": np.random.default_rng(i).standard_normal(1 << 20, dtype=np.float32) for i in range(12)}
    vs.save(sys.argv[1] + "/warm.h5", {"w": np.ones(9 << 18, np.float32)}, storage_options=options)  # imports
    base = status("VmRSS")
    vs.save(sys.argv[1] + "/model.h5", arrays, storage_options=options)
    print(json.dumps({"model_mib": sum(a.nbytes for a in arrays.values()) / 2**20,
                      "added_mib": status("VmHWM") - base}))
''')


def test_an_hdf5_save_to_a_bucket_adds_at_most_64_mib_over_the_model(s3_server: S3TestServer,
                                                                      s3_prefix: str) -> None:
    if not os.path.exists("/proc/self/status"):
        import pytest

        pytest.skip("needs /proc/self/status (Linux) to read the peak RSS")
    done = subprocess.run([sys.executable, "-c", _PROBE, s3_prefix, json.dumps(s3_server.storage_options)],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["model_mib"] == 48.0
    assert result["added_mib"] < 64, result
    print(result)  # parts in flight (6 x 8 MiB) + the part being read + the engine
    assert len(s3_server.log.matching("PUT", path_contains="model.h5", query_contains="partNumber")) == 7
