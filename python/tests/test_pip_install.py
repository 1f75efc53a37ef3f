"""`pip install --no-build-isolation` of the package into a fresh virtualenv made with
--system-site-packages: `import wt` works there with no environment variable, finds its plugins
inside the package, and syncs a torch model through the package's own `wt serve`."""

import os
import shutil
import subprocess
import sys
import textwrap

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
PYTHON_DIR = os.path.dirname(HERE)


@pytest.mark.skipif(not os.environ.get("WT_BUILD_DIR"), reason="needs the build (ctest sets it)")
def test_a_virtualenv_installs_the_package_and_syncs_a_torch_model(tmp_path):
    # A copy of the package sources, so that pip's in-tree build leaves the checkout alone.
    src = tmp_path / "src"
    src.mkdir()
    for name in ("pyproject.toml", "setup.py", "README.md"):
        shutil.copy2(os.path.join(PYTHON_DIR, name), src)
    shutil.copytree(os.path.join(PYTHON_DIR, "wt"), src / "wt",
                    ignore=shutil.ignore_patterns("__pycache__"))
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", str(venv)],
                   check=True)
    python = str(venv / "bin" / "python")
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "WT_CLI", "WT_PLUGIN_PATH")}
    install = subprocess.run(
        [python, "-m", "pip", "install", "-q", "--no-build-isolation", "--no-index", "--no-deps",
         str(src)], env=env, capture_output=True, text=True, timeout=600)
    assert install.returncode == 0, install.stdout + install.stderr
    env.pop("WT_BUILD_DIR")
    script = textwrap.dedent("""
        import os, subprocess, torch, xxhash, wt
        here = os.path.dirname(wt.__file__)
        assert here.startswith(os.environ["VENV"]), here
        found = {p["backend"]: p for p in wt.plugins()}
        assert all(found[b]["usable"] and found[b]["path"].startswith(here)
                   for b in ("ipc", "nccl", "sparse_nccl")), found
        serve = subprocess.Popen([os.path.join(here, "bin", "wt"), "serve", "--port", "0",
                                  "--backend", "ipc"], stdout=subprocess.PIPE, text=True)
        url = serve.stdout.readline().split("listening on ")[1].split()[0]
        model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.LayerNorm(8))
        engine = wt.trainer_init({"backend": "ipc"}, client=url, source=model)
        engine.send_weights(weight_version="v1")
        want = {n: xxhash.xxh3_64_hexdigest(p.detach().numpy().tobytes())
                for n, p in model.named_parameters()}
        assert wt.HttpClient(url).weight_checksums() == want
        engine.close()
        serve.terminate()
        serve.wait()
        print("synced", len(want))
    """)
    run = subprocess.run([python, "-c", script], env={**env, "VENV": str(venv)},
                         capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert run.returncode == 0, run.stdout + run.stderr
    # `wt` on the environment's PATH: the packaged program.
    version = subprocess.run([str(venv / "bin" / "wt"), "--version"], env=env,
                             capture_output=True, text=True, timeout=60)
    assert version.returncode == 0 and version.stdout.strip(), version.stdout + version.stderr
    assert run.stdout.strip() == "synced 4"
