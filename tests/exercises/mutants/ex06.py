"""Exercise 6, data or model parallelism: `choose(s)` for a Scenario."""

from mutants import accepted, refused


def _rule(s, gb_per_s=None, state_bytes=None, with_activations=True, compare_cuts=True,
          ring_factor=True, cuts_twice=True, workers=None, sharded=False):
    """The course's rule, with one slip built in, as a student might write it."""
    per_param = s.state_bytes_per_param if state_bytes is None else state_bytes
    replica = s.params * per_param / 1e9
    need = replica + (s.activations_gb if with_activations else 0)
    p = s.workers if workers is None else workers
    if need > s.device_memory_gb:
        fits_sharded = replica / p + s.activations_gb <= s.device_memory_gb
        return "sharded" if sharded and fits_sharded else "model"
    bandwidth = gb_per_s(s) if gb_per_s else s.link_gbit_s * 1e9 / 8
    factor = 2 * (p - 1) / p if ring_factor else 1.0
    allreduce = factor * 4 * s.params / bandwidth
    if allreduce <= s.compute_s:
        return "data"
    if not compare_cuts:
        return "model"
    cut = (2 if cuts_twice else 1) * s.cut_activations_mb * 1e6 / bandwidth
    return "model" if cut < allreduce else "data"


@accepted()
def the_rule(s):
    return _rule(s)


@accepted()
def the_rule_with_sharding(s):
    return _rule(s, sharded=True)


@accepted()
def in_other_words(s):
    return {"data": "Data parallelism", "model": "model parallelism (pipeline)"}[_rule(s)]


@refused("Bits are not bytes", "1.25 GB/s")
def bits_for_bytes(s):
    return _rule(s, gb_per_s=lambda s: s.link_gbit_s * 1e9)


@refused("16 bytes per parameter")
def weights_only(s):
    return _rule(s, state_bytes=4)


@refused("Activations count too")
def without_activations(s):
    return _rule(s, with_activations=False)


@refused("2(p − 1)/p × n")
def without_the_ring_factor(s):
    return _rule(s, ring_factor=False)


@refused("Activations cross each cut twice")
def cuts_counted_once(s):
    return _rule(s, cuts_twice=False)


@refused("large feature maps", "even more")
def model_whenever_communication_bound(s):
    return _rule(s, compare_cuts=False)


@refused("A whole replica fits", "simpler")
def always_sharded(s):
    return "sharded"


@refused("Sharded data parallelism (ZeRO-3, FSDP) would fit")
def always_data(s):
    return "data"


@refused("A replica fits")
def always_model(s):
    return "model"


@refused("70-billion", "Cut the model itself")
def sharded_wherever_a_replica_does_not_fit(s):
    """Without asking whether a shard fits."""
    replica = s.params * s.state_bytes_per_param / 1e9 + s.activations_gb
    return "sharded" if replica > s.device_memory_gb else _rule(s)


@refused("for '1.5B-parameter model trained with SGD and momentum'")
def sixteen_where_state_bytes_belongs(s):
    return _rule(s, state_bytes=16)


@refused("for '100M-parameter model, 2 workers")
def eight_where_workers_belongs(s):
    return _rule(s, workers=8)


@refused("for '100M-parameter model, 2 workers")
def four_where_workers_belongs(s):
    return _rule(s, workers=4)


@refused("for '100M-parameter model, 2 workers")
def ten_gbits_where_the_link_belongs(s):
    return _rule(s, gb_per_s=lambda s: 10e9 / 8)


@refused("you chose data parallelism", "not n once")
def twice_the_gradient_whatever_p(s):
    return _rule(s, ring_factor=False, gb_per_s=lambda s: s.link_gbit_s * 1e9 / 16)


@refused("a job drawn for this check")
def the_scenarios_by_heart(s):
    from workbench.exercises import parallelism as ex

    known = {x.name: _rule(x) for x in ex.SCENARIOS}
    return known.get(s.name, "data")


@refused("a job drawn for this check")
def the_scenarios_by_heart_model_otherwise(s):
    from workbench.exercises import parallelism as ex

    known = {x.name: _rule(x) for x in ex.SCENARIOS}
    return known.get(s.name, "model")


@refused("package's own", "Write it yourself")
def the_checkers_reference(s):
    from workbench.exercises.references import choices

    return sorted(choices(s))[0]


@refused("Return one choice")
def hedges(s):
    return "model or data"


@refused("'data' or 'model'")
def a_number(s):
    return 42
