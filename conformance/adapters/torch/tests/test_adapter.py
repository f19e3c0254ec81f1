"""Unit tests of qspec_torch (run by tests/adapter_torch.sh where torch is importable).
Each test states the value it expects, computed here by hand or in float64, not by the
adapter."""

import math
import os
import sys
import tempfile
import unittest

import numpy as np
import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from qspec_torch import npyio  # noqa: E402
from qspec_torch.gdn import gdn  # noqa: E402
from qspec_torch.manifest import NotSupported  # noqa: E402
from qspec_torch.program import run_variant  # noqa: E402
from qspec_torch.recipes import torchao_recipe  # noqa: E402


def recipe(name, fmts, eps=1e-12, pow2=False):
    roles = {r: {"format": f, "eps": eps, "pow2": pow2} for r, f in zip(("x", "w", "dy"), fmts)}
    return {"name": name, **roles}


class NpyTest(unittest.TestCase):
    def test_bf16_file_holds_the_bits_in_the_structured_field(self):
        t = torch.tensor([1.0, -2.0, 0.5], dtype=torch.bfloat16)
        with tempfile.TemporaryDirectory() as d:
            p = os.path.join(d, "a.npy")
            npyio.save(p, t, "bf16", [3])
            a = np.load(p)
            self.assertEqual(a.dtype.names, ("bfloat16",))
            self.assertEqual([int(v) for v in a["bfloat16"]], [0x3F80, 0xC000, 0x3F00])
            back = npyio.load(p, "bf16")
            self.assertTrue(torch.equal(back, t))

    def test_a_shape_other_than_the_manifests_is_refused(self):
        with tempfile.TemporaryDirectory() as d:
            with self.assertRaises(ValueError):
                npyio.save(os.path.join(d, "a.npy"), torch.zeros(2, 3), "fp32", [3, 2])


class RecipeTest(unittest.TestCase):
    def test_current_with_eps_1e12_is_torchaos_tensorwise(self):
        self.assertEqual(torchao_recipe(recipe("current", ("e4m3", "e4m3", "e5m2"))), "tensorwise")

    def test_current_with_eps_0_is_refused_naming_torchaos_floor(self):
        with self.assertRaisesRegex(NotSupported, "1e-12"):
            torchao_recipe(recipe("current", ("e4m3", "e4m3", "e5m2"), eps=0.0))

    def test_current_with_pow2_is_refused(self):
        with self.assertRaisesRegex(NotSupported, "rounds the scale up"):
            torchao_recipe(recipe("current", ("e4m3", "e4m3", "e5m2"), pow2=True))

    def test_current_with_e4m3_gradients_is_refused(self):
        with self.assertRaisesRegex(NotSupported, "dy as e5m2"):
            torchao_recipe(recipe("current", ("e4m3", "e4m3", "e4m3")))

    def test_rowwise_recipes_map_to_their_names(self):
        for name in ("rowwise", "rowwise_with_gw_hp"):
            r = recipe(name, ("e4m3", "e4m3", "e4m3"), pow2=True)
            self.assertEqual(torchao_recipe(r), name)

    def test_delayed_and_mxfp8_are_refused(self):
        with self.assertRaisesRegex(NotSupported, "no delayed scaling"):
            torchao_recipe(recipe("delayed", ("e4m3", "e4m3", "e5m2")))
        with self.assertRaisesRegex(NotSupported, "mxfp8"):
            torchao_recipe(recipe("mxfp8", ("e4m3", "e4m3", "e4m3")))


class GdnTest(unittest.TestCase):
    def test_one_token_gives_beta_v_scale_times_qk(self):
        # one token, d = 2: h = k (beta v)^T, o = h^T (scale q) = beta v scale (k . q);
        # q = k = x / sqrt(25 + 1e-6) rounded to bf16: 0.6 -> 0.6015625, 0.8 -> 0.80078125
        x = torch.tensor([[3.0, 4.0]], dtype=torch.bfloat16)
        g, beta = torch.tensor([-0.5]), torch.tensor([0.5])
        qk = 0.6015625**2 + 0.80078125**2
        want = [0.5 * v * (1 / math.sqrt(2.0)) * qk for v in (3.0, 4.0)]
        o = gdn(x, g, beta, 1)
        self.assertEqual(o.dtype, torch.bfloat16)
        want_bf16 = torch.tensor([want], dtype=torch.float64).to(torch.bfloat16)
        self.assertTrue(torch.equal(o, want_bf16), (o, want_bf16))

    def test_the_second_token_sees_the_decayed_state(self):
        # token 2 with g = log(1/2): h = h1 / 2 before its update; x2 = x1 gives
        # u2 = beta (v - h^T k) with h^T k = (beta v (k.k)) / 2
        x = torch.tensor([[3.0, 4.0], [3.0, 4.0]], dtype=torch.bfloat16)
        g = torch.tensor([0.0, math.log(0.5)])
        beta = torch.tensor([0.5, 0.25])
        kk = 0.6015625**2 + 0.80078125**2
        v = torch.tensor([3.0, 4.0], dtype=torch.float64)
        u1 = 0.5 * v
        hk = 0.5 * u1 * kk  # (h1 / 2)^T k with h1 = k u1^T
        u2 = 0.25 * (v - hk)
        o2 = (0.5 * u1 * kk + u2 * kk) / math.sqrt(2.0)  # h2^T (scale q), q = k
        o = gdn(x, g, beta, 1)
        self.assertTrue(torch.allclose(o[1].double(), o2, rtol=2**-7, atol=0), (o[1], o2))


class ProgramTest(unittest.TestCase):
    def variant(self, program, name="v"):
        return {"name": name, "x": "x", "steps": 1, "backward": True, "program": program}

    def inputs(self):
        gen = torch.Generator().manual_seed(5)
        rnd = lambda *s: (torch.rand(*s, generator=gen) - 0.5).to(torch.bfloat16)  # noqa: E731
        return {"x": rnd(16, 32), "dy": rnd(16, 32), "w1": rnd(32, 32), "w2": rnd(32, 32)}

    def test_the_trace_of_a_checkpointed_linear_has_its_recompute_before_its_backward(self):
        prog = [
            {"linear": {"name": "lin1", "w": "w1"}},
            {"checkpoint": {"body": [{"linear": {"name": "lin2", "w": "w2"}}]}},
            {"backward": {"dy": "dy"}},
        ]
        res, trace = run_variant(self.variant(prog), self.inputs(), "cpu", False)
        got = [(r["phase"], r["op"], r["precision"]) for r in trace]
        want = [("forward", "lin1", "high"), ("forward", "lin2", "high"),
                ("recompute", "lin2", "high"), ("backward", "lin2", "high"),
                ("backward", "lin1", "high")]
        self.assertEqual(got, want)
        self.assertEqual(set(res), {"v/y", "v/dx", "v/grad.lin1", "v/grad.lin2"})

    def test_a_bf16_linear_gives_x_w_transposed(self):
        inp = self.inputs()
        prog = [{"linear": {"name": "lin1", "w": "w1"}}, {"backward": {"dy": "dy"}}]
        res, _ = run_variant(self.variant(prog), inp, "cpu", False)
        want = (inp["x"].double() @ inp["w1"].double().T).to(torch.bfloat16)
        err = (res["v/y"].detach().double() - want.double()).norm() / want.double().norm()
        self.assertLess(float(err), 2**-8)
        want_dw = (inp["dy"].double().T @ inp["x"].double()).to(torch.bfloat16)
        err = (res["v/grad.lin1"].detach().double() - want_dw.double()).norm() / want_dw.double().norm()
        self.assertLess(float(err), 2**-8)

    def test_a_gelu_gives_the_tanh_form_and_its_derivative_in_bf16(self):
        inp = self.inputs()
        prog = [{"gelu": {"name": "act"}}, {"backward": {"dy": "dy"}}]
        res, trace = run_variant(self.variant(prog), inp, "cpu", False)
        x, dy = inp["x"].double(), inp["dy"].double()
        u = math.sqrt(2 / math.pi) * (x + 0.044715 * x**3)
        t = torch.tanh(u)
        want = 0.5 * x * (1 + t)
        dwant = dy * (0.5 * (1 + t) + 0.5 * x * (1 - t * t) * math.sqrt(2 / math.pi)
                      * (1 + 3 * 0.044715 * x * x))
        for got, w in ((res["v/y"], want), (res["v/dx"], dwant)):
            self.assertEqual(got.dtype, torch.bfloat16)
            err = (got.detach().double() - w).abs().max() / w.abs().max()
            self.assertLess(float(err), 2**-8)
        self.assertEqual(set(res), {"v/y", "v/dx"})  # no parameters, no grad.act
        got = [(r["phase"], r["op"], r["precision"], r["recipe"]) for r in trace]
        self.assertEqual(got, [("forward", "act", "high", None), ("backward", "act", "high", None)])

    def test_the_trace_of_a_checkpointed_mlp_block_recomputes_its_gelu(self):
        prog = [
            {"checkpoint": {"body": [
                {"linear": {"name": "up", "w": "w1"}},
                {"gelu": {"name": "act"}},
                {"linear": {"name": "down", "w": "w2"}},
            ]}},
            {"backward": {"dy": "dy"}},
        ]
        res, trace = run_variant(self.variant(prog), self.inputs(), "cpu", False)
        got = [(r["phase"], r["op"]) for r in trace]
        want = [("forward", "up"), ("forward", "act"), ("forward", "down"),
                ("recompute", "up"), ("recompute", "act"), ("recompute", "down"),
                ("backward", "down"), ("backward", "act"), ("backward", "up")]
        self.assertEqual(got, want)
        self.assertEqual(set(res), {"v/y", "v/dx", "v/grad.up", "v/grad.down"})

    def test_a_calibration_region_is_refused(self):
        prog = [{"calibrate": {"recipe": None, "body": []}}]
        with self.assertRaisesRegex(NotSupported, "calibration"):
            run_variant(self.variant(prog), self.inputs(), "cpu", False)


if __name__ == "__main__":
    unittest.main()
