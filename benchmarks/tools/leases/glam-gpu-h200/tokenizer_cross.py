"""Which software gives GLAM's peaked prior: print the first 8 GoToLocal bot-state prompts' action
distributions (float32, CPU) for a converted model folder, with the transformers version and a prompt hash.
Run on the lease from <tmp>/gw6/ (lease_call2.sh); from the repo root: python tokenizer_cross.py MODEL_DIR."""
import hashlib
import sys

sys.path.insert(0, "benchmarks/costs")   # glam_device.py, which puts the other folders on the path
import transformers  # noqa: E402
from glam_device import build_policy, distributions, entropy  # noqa: E402
from glam_prior import bot_states, prompt_at  # noqa: E402

model = sys.argv[1]
states = bot_states("GoToLocal", 32, 7_000_000)
prompts = [prompt_at(s["mission"], s["captions"], s["actions"], s["t"], 3, True) for s in states]
digest = hashlib.sha256("\n".join(prompts).encode()).hexdigest()[:12]
pol = build_policy(model, "cpu", "float32", "sdpa", 8)
p = distributions(pol, prompts[:8], 8)
print(f"XVER transformers {transformers.__version__} model {model} prompts {digest} "
      f"entropy {[round(x, 3) for x in entropy(p).tolist()]} first {[round(x, 3) for x in p[0].tolist()]}", flush=True)
