"""Which torchao Float8Linear recipe answers a qspec region's recipe (torchao 0.18.0).

torchao.float8 has three recipes, all dynamic (its ScalingType has only DYNAMIC and
DISABLED): `tensorwise` is qspec's current scaling with eps 1e-12, E4M3 for x and w and E5M2
for dy, no power-of-two scales (its pow2 option rounds up, not the spec's rule, so a case
asking pow2 is refused); `rowwise` and `rowwise_with_gw_hp` are qspec's recipes of the same
names, all roles E4M3 with power-of-two scales. Anything else is refused with the reason."""

from .manifest import NotSupported

TORCHAO_EPS = 1e-12


def _formats(recipe, want):
    for role, fmt in zip(("x", "w", "dy"), want):
        got = recipe[role]["format"]
        if got != fmt:
            raise NotSupported(
                f"torchao's {recipe['name']} recipe quantizes {role} as {fmt}; the case asks {got}"
            )


def torchao_recipe(recipe):
    """The Float8LinearRecipeName value for a manifest recipe, or NotSupported."""
    name = recipe["name"]
    if name == "current":
        _formats(recipe, ("e4m3", "e4m3", "e5m2"))
        for role in ("x", "w", "dy"):
            eps = float(recipe[role]["eps"])
            if abs(eps - TORCHAO_EPS) > 1e-6 * TORCHAO_EPS:
                raise NotSupported(
                    f"torchao's tensorwise recipe floors amax at 1e-12; the case asks eps={eps:g} "
                    f"for {role}"
                )
            if recipe[role]["pow2"]:
                raise NotSupported(
                    "torchao's round_scales_to_power_of_2 rounds the scale up in float32, not "
                    "down as the case's pow2 does"
                )
        return "tensorwise"
    if name in ("rowwise", "rowwise_with_gw_hp"):
        _formats(recipe, ("e4m3", "e4m3", "e4m3"))
        for role in ("x", "w", "dy"):
            if not recipe[role]["pow2"]:
                raise NotSupported(f"torchao's {name} recipe always uses power-of-two scales")
        return name
    if name == "delayed":
        raise NotSupported("torchao 0.18.0 has no delayed scaling (its ScalingType is dynamic only)")
    raise NotSupported(
        f"recipe {name} has no torchao.float8 Float8Linear recipe (tensorwise, rowwise, "
        "rowwise_with_gw_hp)"
    )
