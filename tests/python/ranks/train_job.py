"""train_job.py DATA CFG — one rank of tests/python/test_train.py: a rank of a launched job
(holding the job's communicator) calls shoal.train; the job's ranks train together and every
rank gets the report."""
import json
import sys

import shoal

comm = shoal.init()
r = shoal.train(sys.argv[2], data=sys.argv[1], epochs=2, threads=1, scaling="strong", quiet=True)
print("rank %d report %s" % (comm.rank, json.dumps({"accuracy": r["accuracy"], "steps": r["steps"]})), flush=True)
