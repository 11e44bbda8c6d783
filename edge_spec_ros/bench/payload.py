"""Bytes on the wire per round for every mode at a real vocabulary (Qwen2: 151,657 tokens).

The messages are the protocol's own, encoded by ``wire.codec`` (headers, LZ4 where it pays) around
synthetic arrays of the real sizes: draft distributions are softmax(4·N(0,1)) over the vocabulary,
so the float32 buffers are about as (in)compressible as a real model's.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import torch

from edge_spec_ros.spec.sparse import DraftDistribution, to_sparse
from edge_spec_ros.wire.codec import encoded_size
from edge_spec_ros.wire.messages import DraftBlock, ExitResult

QWEN2_VOCAB = 151_657
QWEN2_VL_7B_LAYERS = 28
SESSION = bytes(16)


def _size(msg) -> int:
    return encoded_size(SESSION, msg)


def payload_table(vocab: int = QWEN2_VOCAB, gamma: int = 4, tkslt_k: int = 20, lowpay_k: int = 4,
                  lossy_k: int = 10, layers: int = QWEN2_VL_7B_LAYERS, seed: int = 0) -> list[dict]:
    """One row per mode: bytes up per round, bytes down per round with and without a rejection."""
    g = torch.Generator().manual_seed(seed)
    q = torch.softmax(torch.randn(gamma, vocab, generator=g) * 4, -1)  # (γ, V)
    tokens = np.arange(vocab - gamma, vocab, dtype=np.int32)  # the largest ids: the longest varints (wire/compact.py)
    base = dict(round=7, position=1234, tokens=tokens)
    verdict = ExitResult(round=7, layer=layers, accepted=2, tokens=np.arange(3, dtype=np.int32), confidence=0.9,
                         is_final=True, compute_s=0.6)
    early = ExitResult(round=7, layer=layers // 2, accepted=2, tokens=np.arange(3, dtype=np.int32),
                       confidence=0.8, is_final=False, compute_s=0.3)
    p_row = q[0].numpy()
    dssd_reject = ExitResult(round=7, layer=layers, accepted=2, tokens=np.arange(2, dtype=np.int32), confidence=0.9,
                             is_final=True, compute_s=0.6, resample=True, p=p_row)
    top_vals, top_ids = torch.topk(q[0], lossy_k)
    lossy_reject = ExitResult(round=7, layer=layers, accepted=2, tokens=np.arange(2, dtype=np.int32),
                              confidence=0.9, is_final=True, compute_s=0.6, resample=True,
                              p=top_vals.numpy(), p_ids=top_ids.to(torch.int32).numpy(), p_tv=0.1)

    def sparse_block(k: int) -> DraftBlock:
        qk = torch.stack([DraftDistribution(k).apply(row) for row in q])
        ids, values = to_sparse(qk, k)
        return DraftBlock(**base, q_ids=ids.numpy(), q_values=values.numpy())

    dense_up = _size(DraftBlock(**base, q=q.numpy()))
    token = _size(ExitResult(round=0, layer=0, accepted=0, tokens=np.zeros(1, np.int32), confidence=1.0,
                             is_final=False))
    rows = [
        ("ar", 0, token, token, "the prompt once, then one message down per token"),
        ("sd", dense_up, _size(verdict), _size(verdict), "γ×V float32 q up"),
        ("fsd", dense_up, _size(verdict) + (layers - 1) * _size(early), None,
         f"as sd, plus {layers - 1} early-exit verdicts down"),
        ("dssd", _size(DraftBlock(**base, q_draft=q[:, 0].numpy())), _size(verdict), _size(dssd_reject),
         "γ values up; p_δ (V float32) down on a rejection"),
        ("tkslt", _size(sparse_block(tkslt_k)), _size(verdict), _size(verdict), f"K={tkslt_k} ids + values per token up"),
        ("lowpay", _size(sparse_block(lowpay_k)), _size(verdict), _size(verdict),
         f"K={lowpay_k} ids + values per token up, verdict down"),
        ("pico", _size(replace(DraftBlock(**base, q_draft=q[:, 0].numpy()), chained=True)), _size(verdict),
         _size(dssd_reject), "as dssd (separate rejection sampling); blocks may leave before the verdict"),
        ("pico-fsd", dense_up, _size(verdict) + (layers - 1) * _size(early), None,
         "as fsd; blocks may leave before the verdict"),
        ("dssd-topk-lossy", _size(DraftBlock(**base, q_draft=q[:, 0].numpy())), _size(verdict), _size(lossy_reject),
         f"LOSSY: top-{lossy_k} of p_δ down on a rejection"),
    ]
    return [{"mode": mode, "up_bytes": up, "down_bytes_all_accepted": accepted,
             "down_bytes_on_rejection": rejected if rejected is not None else accepted, "note": note}
            for mode, up, accepted, rejected, note in rows]
