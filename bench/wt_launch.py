"""What the m2n benches share: one `wt launch --json` run of a config text, its report checked."""
import json
import os
import subprocess
import sys
import tempfile


def launch(wt, config_text, label):
    """Runs `wt launch` on config_text with debug logs; returns (report, stderr), or exits naming
    `label` when the launch fails or a round is not verified."""
    with tempfile.NamedTemporaryFile("w", suffix=".yaml", delete=False) as f:
        f.write(config_text)
    env = dict(os.environ, WT_LOG_LEVEL="debug")
    p = subprocess.run([wt, "launch", f.name, "--json"], capture_output=True, text=True, env=env)
    os.unlink(f.name)
    if p.returncode != 0:
        sys.exit(f"{label}: wt launch failed:\n{p.stdout}\n{p.stderr[-3000:]}")
    report = json.loads(p.stdout[p.stdout.index("{"):])
    if not all(r["verified"] for r in report["rounds"]):
        sys.exit(f"{label}: a round was not verified")
    return report, p.stderr
