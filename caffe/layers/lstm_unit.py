"""LSTMUnit: one timestep of the LSTM non-linearity (BVLC's helper of the LSTM layer).

Bottoms: c_{t-1} (1×N×D), the gate inputs (1×N×4D, in the order i, f, o, g), cont_t
(1×N). Tops: c_t and h_t (1×N×D each):

    i = σ(i'), f = cont_t · σ(f'), o = σ(o'), g = tanh(g')
    c_t = f ⊙ c_{t-1} + i ⊙ g,  h_t = o ⊙ tanh(c_t)

No clipping. cont_t = 0 drops c_{t-1}, which starts a new sequence. The gradient is the
exact one (BVLC's CUDA kernel); BVLC's CPU kernel differs from it only for a cont that is
neither 0 nor 1 (it takes σ'(f') as f·(1−f) with f already scaled by cont). There is no
gradient for cont.

Backward is written out as BVLC's: it keeps the gate activations of the forward, but reads
c_t from the top and c_{t-1} and cont_t from the bottoms as they are when it runs, so a later
layer that rewrote c_t in place changes the gradient as it does in BVLC.
"""

from __future__ import annotations

import torch

from caffe.layer import Layer, register_layer


def gate_activations(gates: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """gates (..., 4D) as i', f', o', g' -> σ(i'), σ(f') (not yet scaled by cont), σ(o'),
    tanh(g'): BVLC's X_acts, which LSTMUnit keeps for its backward."""
    i, f, o, g = gates.chunk(4, dim=-1)
    return torch.sigmoid(i), torch.sigmoid(f), torch.sigmoid(o), torch.tanh(g)


def lstm_cell(
    c_prev: torch.Tensor, acts: tuple[torch.Tensor, ...], cont: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """(c_t, h_t) from c_{t-1}, the gate activations and cont_t (the module docstring)."""
    i, f, o, g = acts
    c = cont.unsqueeze(-1) * f * c_prev + i * g
    return c, o * torch.tanh(c)


def lstm_unit(
    c_prev: torch.Tensor, gates: torch.Tensor, cont: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """c_prev (..., D), gates (..., 4D) as i, f, o, g, cont (...) -> (c, h), each (..., D)."""
    return lstm_cell(c_prev, gate_activations(gates), cont)


@register_layer("LSTMUnit")
class LSTMUnitLayer(Layer):
    exact_num_bottom = 3
    exact_num_top = 2

    def allow_force_backward(self, bottom_index: int) -> bool:
        return bottom_index != 2

    def reshape(self, bottom, top):
        c_prev, gates = bottom[0], bottom[1]
        n = c_prev.shape[1] if c_prev.num_axes > 1 else -1
        for i, blob in enumerate(bottom):
            axes = 2 if i == 2 else 3
            if blob.num_axes != axes or blob.shape[0] != 1 or blob.shape[1] != n:
                raise self.error(
                    f"bottom[{i}] must have shape (1, N{', ...' if axes == 3 else ''}) with "
                    f"{axes} axes and N = bottom[0].shape[1]; got {blob.shape} (bottom[0] "
                    f"{c_prev.shape})"
                )
        self.hidden_dim = c_prev.shape[2]
        if gates.shape[2] != 4 * self.hidden_dim:
            raise self.error(f"the gate inputs need 4 x {self.hidden_dim} channels (i, f, o, "
                             f"g), got {gates.shape}")  # fmt: skip
        top[0].reshape_like(c_prev)
        top[1].reshape_like(c_prev)

    def forward(self, bottom, top):
        c_prev, gates, cont = (b.data_tensor for b in bottom)
        self._acts = gate_activations(gates)  # kept for backward
        c, h = lstm_cell(c_prev, self._acts, cont)
        top[0].take_data(c)
        top[1].take_data(h)

    def backward(self, top, propagate_down, bottom):
        if propagate_down[2]:
            raise self.error("cannot backpropagate to sequence indicators (bottom[2], cont)")
        if not (propagate_down[0] or propagate_down[1]):
            return
        if getattr(self, "_acts", None) is None:
            raise self.error("backward called without a forward pass")
        i, f, o, g = self._acts
        c = top[0].data_tensor  # as it is now: a later in-place layer's values count
        c_prev = bottom[0].data_tensor
        cont = bottom[2].data_tensor.unsqueeze(-1)
        tanh_c = torch.tanh(c)
        dc = top[0].diff_tensor + top[1].diff_tensor * o * (1 - tanh_c * tanh_c)
        if propagate_down[1]:
            di = dc * g * i * (1 - i)
            df = dc * cont * c_prev * f * (1 - f)
            do = top[1].diff_tensor * tanh_c * o * (1 - o)
            dg = dc * i * (1 - g * g)
            bottom[1].take_diff(torch.cat([di, df, do, dg], dim=-1))
        if propagate_down[0]:
            bottom[0].take_diff(dc * cont * f)
