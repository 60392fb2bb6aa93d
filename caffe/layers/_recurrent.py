"""What RNN and LSTM share (Caffe's RecurrentLayer): the inputs, the parameter layout,
the hidden state carried between batches, and what gradients flow where.

Bottoms: x (T×N×...: T timesteps of N independent streams), cont (T×N: 0 where a
sequence starts, which resets the state; 1 where it continues), an optional static input
x_static (N×..., added to every timestep), and with recurrent_param.expose_hidden the
initial states (1×N×num_output each: h_0 for RNN; h_0, c_0 for LSTM). Tops: the outputs
(T×N×num_output), then with expose_hidden the final states (h_T; h_T, c_T).

BVLC builds an unrolled internal Net; here the same computation is a loop of torch ops
whose gradients autograd takes. What must stay true, so that BVLC .caffemodel files load
and training matches:
- the parameter blobs, their order and shapes, are those the unrolled net exposes: the
  input transform W_x (G×K, K = the product of x's axes from 2 on) and its bias b (G),
  the static transform W_x_static (G×S) when x_static is given, then the subclass's own
  (`step_param_shapes`); G = num_output × `gates`;
- h_conted_{t-1} = cont_t · h_{t-1} feeds the recurrence (the subclass applies it);
- without expose_hidden, each forward starts from the previous forward's final state
  (zeros at first; `reset()` zeroes it). The state buffer keeps Caffe's Blob capacity
  rule: when N shrinks the first N streams' states carry on, when N grows past every
  earlier N the state is zeros;
- gradients never cross batches: the exposed final-state tops' diffs are ignored and the
  exposed initial-state bottoms get no gradient (zero diffs), as in BVLC, whose unrolled
  net shares only their data;
- T may not change after setup; N may.
"""

from __future__ import annotations

import logging
import math

import torch

from caffe.fillers import fill
from caffe.layer import AutogradLayer

_log = logging.getLogger("caffe")


class RecurrentLayer(AutogradLayer):
    gates = 1  # rows of the input transforms per output unit (LSTM: i, f, o, g)
    state_names: tuple[str, ...] = ("h",)  # recurrent states, in BVLC's order

    def __init__(self, layer_param=None, device=None) -> None:
        super().__init__(layer_param, device)
        self.expose_hidden = self.layer_param.recurrent_param.expose_hidden
        self.num_exposed = len(self.state_names) if self.expose_hidden else 0
        self.min_bottom = 2 + self.num_exposed
        self.max_bottom = 3 + self.num_exposed
        self.exact_num_top = 1 + self.num_exposed
        # Final states of the last forward, flat, with Blob capacity (see the docstring).
        self._state: list[torch.Tensor | None] = [None] * len(self.state_names)

    # ----- the subclass contract --------------------------------------------------------
    def step_param_shapes(self, num_output: int) -> list[tuple[list[int], str]]:
        """Shapes of the parameters after the input transforms, with "weight" or "bias"
        naming the filler each takes."""
        raise NotImplementedError(f"{type(self).__name__}.step_param_shapes")

    def unroll(
        self,
        x_proj: torch.Tensor,
        cont: torch.Tensor,
        static_proj: torch.Tensor | None,
        state: list[torch.Tensor],
        params: list[torch.Tensor],
    ) -> tuple[torch.Tensor, list[torch.Tensor]]:
        """Run the T steps: x_proj T×N×G (W_x·x + b), cont T×N, static_proj N×G or None,
        state N×num_output each, params those of `step_param_shapes`. Returns the output
        T×N×num_output and the final states N×num_output each."""
        raise NotImplementedError(f"{type(self).__name__}.unroll")

    # ----- setup and reshape ------------------------------------------------------------
    def allow_force_backward(self, bottom_index: int) -> bool:
        return bottom_index != 1  # no gradient for the sequence continuation indicators

    def setup(self, bottom, top):
        p = self.layer_param.recurrent_param
        if p.num_output <= 0:
            raise self.error("recurrent_param.num_output must be positive")
        self.num_output = p.num_output
        self._check_x_and_cont(bottom)
        self.T = bottom[0].shape[0]
        self.N = bottom[0].shape[1]
        _log.info("Initializing recurrent layer: assuming input batch contains %d timesteps "
                  "of %d independent streams.", self.T, self.N)  # fmt: skip
        self.static_input = len(bottom) > 2 + self.num_exposed
        self.input_dim = math.prod(bottom[0].shape[2:])
        gate_rows = self.num_output * self.gates
        shapes = [([gate_rows, self.input_dim], "weight"), ([gate_rows], "bias")]
        if self.static_input:
            x_static = bottom[2]
            if x_static.num_axes < 1 or x_static.shape[0] != self.N:
                raise self.error(f"bottom[2] (x_static) must have shape ({self.N}, ...) to "
                                 f"match x's {self.N} streams, got {x_static.shape}")  # fmt: skip
            self.static_dim = math.prod(x_static.shape[1:])
            shapes.append(([gate_rows, self.static_dim], "weight"))
        shapes += self.step_param_shapes(self.num_output)
        expected = [shape for shape, _ in shapes]
        if self.blobs:
            got = [b.shape for b in self.blobs]
            if got != expected:
                raise self.error(f"given blobs have shapes {got}, expected {expected}")
            return
        for shape, kind in shapes:
            filler = p.weight_filler if kind == "weight" else p.bias_filler
            fill(self.blobs.add_blob(*shape), filler)

    def _check_x_and_cont(self, bottom) -> None:
        x, cont = bottom[0], bottom[1]
        if x.num_axes < 2:
            raise self.error("bottom[0] must have at least 2 axes -- (#timesteps, #streams, ...)"
                             f"; got shape {x.shape}")  # fmt: skip
        if cont.num_axes != 2 or cont.shape != x.shape[:2]:
            raise self.error(f"bottom[1] (cont) must have shape (#timesteps, #streams) = "
                             f"{x.shape[:2]}, got {cont.shape}")  # fmt: skip

    def reshape(self, bottom, top):
        self._check_x_and_cont(bottom)
        x = bottom[0]
        if x.shape[0] != self.T:
            raise self.error(f"input number of timesteps changed: {self.T} at setup, now "
                             f"{x.shape[0]}")  # fmt: skip
        self.N = x.shape[1]
        if math.prod(x.shape[2:]) != self.input_dim:
            raise self.error(f"x has {math.prod(x.shape[2:])} features per step (shape "
                             f"{x.shape}); the weights expect {self.input_dim}")  # fmt: skip
        if self.static_input:
            x_static = bottom[2]
            if x_static.shape[:1] != [self.N] or math.prod(x_static.shape[1:]) != self.static_dim:
                raise self.error(f"x_static has shape {x_static.shape}; expected {self.N} "
                                 f"streams of {self.static_dim} features")  # fmt: skip
        state_shape = [1, self.N, self.num_output]
        first_hidden = 2 + int(self.static_input)
        for j, blob in enumerate(bottom[first_hidden:]):
            if blob.shape != state_shape:
                raise self.error(f"shape mismatch - {self.state_names[j]}_0 must be "
                                 f"{state_shape}, bottom[{first_hidden + j}] is "
                                 f"{blob.shape}")  # fmt: skip
        top[0].reshape([self.T, self.N, self.num_output])
        for blob in top[1:]:
            blob.reshape(state_shape)

    # ----- forward and backward ---------------------------------------------------------
    def reset(self) -> None:
        """Zero the carried hidden state (BVLC's RecurrentLayer::Reset)."""
        for buffer in self._state:
            if buffer is not None:
                buffer.zero_()

    def _initial_state(self, bottoms: list[torch.Tensor]) -> list[torch.Tensor]:
        count = self.N * self.num_output
        if self.expose_hidden:
            first = 2 + int(self.static_input)
            return [b.detach().reshape(self.N, self.num_output) for b in bottoms[first:]]
        device = bottoms[0].device  # not self.device: torch.device("cuda") != "cuda:0"
        states = []
        for i, buffer in enumerate(self._state):
            if buffer is None or buffer.numel() < count or buffer.device != device:
                buffer = torch.zeros(count, dtype=torch.float32, device=device)
                self._state[i] = buffer
            states.append(buffer[:count].view(self.N, self.num_output).clone())
        return states

    def compute(self, bottoms, params):
        x = bottoms[0].reshape(self.T, self.N, self.input_dim)
        cont = bottoms[1].detach()
        w_x, b_x = params[0], params[1]
        x_proj = torch.matmul(x, w_x.t()) + b_x
        static_proj = None
        if self.static_input:
            static_proj = bottoms[2].reshape(self.N, self.static_dim) @ params[2].t()
        state = self._initial_state(bottoms)
        output, final = self.unroll(
            x_proj, cont, static_proj, state, params[2 + self.static_input :]
        )
        count = self.N * self.num_output
        for buffer, value in zip(self._state, final):
            if buffer is not None and not self.expose_hidden:
                buffer[:count].copy_(value.detach().reshape(-1))
        if self.layer_param.recurrent_param.debug_info:
            self._log_states(final)
        exposed = [s.detach().reshape(1, self.N, self.num_output) for s in final]
        return [output, *exposed[: self.num_exposed]]

    def _log_states(self, final: list[torch.Tensor]) -> None:
        for name, value in zip(self.state_names, final):
            _log.info("    [Forward] Layer %s, final state %s_%d data: %g", self.name, name,
                      self.T, value.detach().abs().mean().item())  # fmt: skip

    def backward(self, top, propagate_down, bottom):
        if len(propagate_down) > 1 and propagate_down[1]:
            raise self.error("cannot backpropagate to sequence indicators (bottom[1], cont)")
        super().backward(top, propagate_down, bottom)
