import json
import subprocess
import sys

import pytest

from streamlab.cli import main
from streamlab.errors import ModelLoadError
from streamlab.models import load_model


def test_demo_shows_identity_and_speedup(capsys):
    assert main(["demo", "--streams", "4", "--max-new-tokens", "8"]) == 0
    out = capsys.readouterr().out
    assert "identical to solo: 4/4" in out and "speedup" in out


def test_a_model_not_on_disk_gives_a_one_line_error(tmp_path):
    missing = tmp_path / "nowhere"
    proc = subprocess.run([sys.executable, "-m", "streamlab.cli", "demo", "--model", str(missing)],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "not found on disk" in lines[0] and "Traceback" not in proc.stderr


def test_other_architectures_are_refused(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "llama", "architectures": ["LlamaForCausalLM"]}))
    with pytest.raises(ModelLoadError, match="GPT-2 models only"):
        load_model(str(tmp_path))


def test_a_local_gpt2_folder_loads(tmp_path):
    tiny = load_model("tiny")
    tiny.hf_model().save_pretrained(tmp_path)
    tiny.tokenizer.save_pretrained(tmp_path)
    again = load_model(str(tmp_path))
    ids = tiny.tokenizer.encode("Return the value.")
    assert again.tokenizer.encode("Return the value.") == ids
    import torch
    assert torch.equal(again.model.wte, tiny.model.wte)


def test_bench_step_writes_json(tmp_path):
    out = tmp_path / "step.json"
    assert main(["bench", "step", "--model", "tiny", "--batch-sizes", "1,4", "--steps", "3", "--repeats", "1",
                 "--prompt-tokens", "16", "--json", str(out)]) == 0
    rows = json.loads(out.read_text())["rows"]
    assert [r["batch"] for r in rows] == [1, 4] and all(r["paged_over_contiguous"] > 0 for r in rows)


def test_a_suite_that_selects_no_scenario_exits_non_zero_and_says_so(capsys):
    from harness.cli import main as scenario_main

    assert scenario_main(["suite", "--mode", "sim", "-k", "no_such_scenario_anywhere"]) == 2
    assert "nothing to run" in capsys.readouterr().out


def test_a_suite_runs_a_folder_of_ones_own_and_the_schema_prints(tmp_path, capsys):
    from harness.cli import main as scenario_main

    (tmp_path / "mine.yaml").write_text("name: mine\nseed: 1\nmodes: [sim]\ngroups:\n  - name: readers\n    count: 2\n"
                                        "    request: {max_new_tokens: 4}\n    behaviour: {kind: reader}\n"
                                        "expect:\n  finish_reasons: {readers: {length: 2}}\n")
    assert scenario_main(["suite", str(tmp_path), "--mode", "sim"]) == 0
    out = capsys.readouterr().out
    assert "1 scenarios" in out and "1 passed, 0 failed" in out, out
    assert scenario_main(["suite", str(tmp_path), "--mode", "sim", "--update-baseline"]) == 2
    capsys.readouterr()
    assert scenario_main(["schema"]) == 0
    assert json.loads(capsys.readouterr().out)["title"] == "streamlab scenario"
