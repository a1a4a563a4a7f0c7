"""Issue 37 (core side): TF's argument semantics and values that ported code relies on.

The values TensorFlow 2.21 gives are written in each test, with the TF call
they come from in a comment (TensorFlow is not installed here).
"""

from __future__ import annotations

import numpy as np
import pytest

import varstore as vs
from varstore.errors import ValueOutOfRangeError


# ------------------------------------------------------------- item 1: strings keep their full value
def test_string_assign_keeps_the_whole_value(store):
    # TF: v = tf.Variable("abc"); v.assign("defgh"); v.numpy() -> b"defgh"
    v = vs.Variable("abc", store=store)
    v.assign("defgh")
    assert v.numpy().tolist() == "defgh"
    assert v.dtype == np.dtype("<U5")  # the fixed-width storage grew; a shorter value keeps the width
    v.assign("x")
    assert v.numpy().tolist() == "x"


def test_bytes_array_assign_keeps_the_whole_value(store):
    # TF: tf.Variable([b"ab", b"c"]).assign([b"long one", b"x"]).numpy() -> [b"long one", b"x"]
    v = vs.Variable(np.array([b"ab", b"c"]), store=store)
    assert v.assign([b"long one", b"x"]) is v
    assert v.numpy().tolist() == [b"long one", b"x"]


def test_assign_of_an_array_whose_values_would_wrap_is_refused(store):
    # TF: tf.Variable(tf.zeros([2], tf.int32)).assign(np.array([1, 2**40])) raises (int64 tensor into int32)
    v = vs.Variable(np.zeros(2, np.int32), store=store)
    with pytest.raises(ValueOutOfRangeError, match=r"1099511627776.*int64.*int32"):
        v.assign(np.array([1, 2**40], np.int64))
    assert v.numpy().tolist() == [0, 0]
    v.assign(np.array([1, 2], np.int64))  # nothing changes in the cast: allowed, as documented
    assert v.numpy().tolist() == [1, 2]


# ------------------------------------------------------------- item 3: TF's argument semantics
def test_trainable_none_means_the_default(store):
    # TF: tf.Variable(1.0, trainable=None).trainable -> True; tf.compat.v1.get_variable("g", [1], trainable=None)
    #     is in tf.compat.v1.trainable_variables()
    v = vs.Variable(1.0, trainable=None, store=store)
    g = store.get_variable("g", [1], trainable=None)
    assert v.trainable and g.trainable
    assert [x.name for x in store.trainable_variables()] == [v.name, "g"]


def test_on_read_makes_the_default_non_trainable(store):
    # TF: tf.Variable(0.0, synchronization=tf.VariableSynchronization.ON_READ).trainable -> False
    #     (validate_synchronization_aggregation_trainable); an explicit trainable=True stays True (TF core)
    v = vs.Variable(0.0, synchronization=vs.VariableSynchronization.ON_READ, store=store)
    w = vs.Variable(0.0, synchronization=vs.VariableSynchronization.ON_READ, trainable=True, store=store)
    g = store.get_variable("g", [], synchronization=vs.VariableSynchronization.ON_READ,
                           aggregation=vs.VariableAggregation.MEAN)
    assert (v.trainable, w.trainable, g.trainable) == (False, True, False)
    assert g.synchronization is vs.VariableSynchronization.ON_READ and g.aggregation is vs.VariableAggregation.MEAN
    # TF: tf.Variable(0.0).synchronization -> AUTO, .aggregation -> NONE; enum values as TF's
    x = vs.Variable(0.0, store=store)
    assert (x.synchronization, x.aggregation) == (vs.VariableSynchronization.AUTO, vs.VariableAggregation.NONE)
    assert [m.value for m in vs.VariableSynchronization] == [0, 1, 2, 3]
    assert vs.VariableAggregation.ONLY_FIRST_TOWER is vs.VariableAggregation.ONLY_FIRST_REPLICA
    assert vs.Variable(0.0, synchronization=3, store=store).synchronization is vs.VariableSynchronization.ON_READ
    with pytest.raises(vs.VariableArgumentError, match="synchronization"):  # TF: ValueError
        vs.Variable(0.0, synchronization=7, store=store)


def test_python_ints_and_ranges_are_int32(store):
    # TF: tf.Variable(range(3)).dtype -> int32; tf.Variable(7).dtype -> int32; tf.Variable([1, 2**40]).dtype -> int64
    assert vs.Variable(range(3), store=store).dtype == np.int32
    assert vs.Variable(range(3), store=store).numpy().tolist() == [0, 1, 2]
    assert vs.Variable(7, store=store).dtype == np.int32
    assert vs.Variable([1, 2**40], store=store).dtype == np.int64
    assert vs.Variable(np.arange(3), store=store).dtype == np.int64  # a NumPy array keeps its own dtype
    with pytest.raises(ValueOutOfRangeError):  # TF: ValueError (does not fit int64)
        vs.Variable(2**70, store=store)


def test_negative_shape_raises_at_creation(store):
    # TF: tf.compat.v1.get_variable("v", [2, -1]) -> ValueError("Dimension -1 must be >= 0"), nothing created
    with pytest.raises(vs.ShapeMismatchError, match="negative"):
        store.get_variable("v", [2, -1])
    assert store.get_variable_by_name("v") is None
    with pytest.raises(vs.InitializerError, match="fully defined"):  # TF: "Shape of a new variable ... must be fully defined"
        store.get_variable("w", [2, None])


# ------------------------------------------------------------- item 5: arguments ported code passes
def test_constraint_is_applied_after_each_assign(store):
    # TF: v = tf.Variable([1.0, -2.0], constraint=tf.keras.constraints.NonNeg()); an optimizer step
    # (apply_gradients) then assigns v.constraint(v): [x, 0.0]; here every assign is such an update.
    def non_neg(x):
        return np.maximum(x, 0.0)

    v = vs.Variable([1.0, -2.0], constraint=non_neg, store=store)
    assert v.numpy().tolist() == [1.0, -2.0]  # TF never constrains the initial value
    assert v.constraint is non_neg
    v.assign([3.0, -4.0])
    assert v.numpy().tolist() == [3.0, 0.0]
    v.assign_sub([5.0, 0.0])
    assert v.numpy().tolist() == [0.0, 0.0]
    v.assign_add([-1.0, 2.0])
    assert v.numpy().tolist() == [0.0, 2.0]
    v[1].assign(-9.0)
    assert v.numpy().tolist() == [0.0, 0.0]
    g = store.get_variable("g", [2], initializer=vs.constant_initializer(-1.0), constraint=non_neg)
    assert g.numpy().tolist() == [-1.0, -1.0]
    g.assign_add([0.5, 2.0])
    assert g.numpy().tolist() == [0.0, 1.0]
    with pytest.raises(vs.VariableArgumentError, match="constraint"):  # TF: ValueError, not callable
        vs.Variable(1.0, constraint=3, store=store)


def test_use_resource_is_accepted(store):
    # TF: tf.compat.v1.get_variable("r", [1], use_resource=True) / tf.Variable(1.0, use_resource=False): accepted
    assert store.get_variable("r", [1], use_resource=True).shape == (1,)
    assert vs.Variable(1.0, use_resource=False, store=store).numpy() == 1.0


def test_regularizer_losses_are_collected(store):
    # TF1: get_variable("w", initializer=[[1., 2.], [3., 4.]], regularizer=lambda v: 0.5 * tf.reduce_sum(v * v))
    #      adds one loss; sess.run(tf.compat.v1.losses.get_regularization_losses()) -> [15.0]
    def l2(v):
        return 0.5 * np.sum(np.square(v))

    with store.variable_scope("r", reuse=vs.AUTO_REUSE):
        w = store.get_variable("w", initializer=np.array([[1.0, 2.0], [3.0, 4.0]], np.float32), regularizer=l2)
        assert store.get_variable("w", regularizer=l2) is w  # reuse adds no second loss (TF: only new variables)
    losses = store.get_collection(vs.REGULARIZATION_LOSSES)
    assert len(losses) == 1 and losses[0].name == "r/w/Regularizer" and losses[0].variable is w
    assert losses[0]() == 15.0
    w.assign(np.ones((2, 2)))  # evaluated from the current value, as a session.run of the loss tensor
    assert losses[0]() == 2.0
    assert len(store.get_collection(vs.REGULARIZATION_LOSSES)) == 1


def test_variable_scope_defaults_are_inherited(store):
    # TF1: with variable_scope("s", regularizer=r, partitioner=fixed_size_partitioner(2)):
    #        with variable_scope("inner"): get_variable("e", [4, 2]) -> PartitionedVariable of 2 parts,
    #      each part regularized (one loss per part, _get_single_variable), names s/inner/e/part_0, part_1
    def count(v):
        return float(np.asarray(v).size)

    with store.variable_scope("s", regularizer=count, partitioner=vs.fixed_size_partitioner(2)) as outer:
        with store.variable_scope("inner"):
            e = store.get_variable("e", [4, 2], initializer=vs.zeros_initializer())
            b = store.get_variable("b", [], initializer=vs.zeros_initializer())  # shape (): not partitioned
    assert isinstance(e, vs.PartitionedVariable) and [p.name for p in e] == ["s/inner/e/part_0", "s/inner/e/part_1"]
    assert isinstance(b, vs.Variable)
    losses = store.get_collection(vs.REGULARIZATION_LOSSES)
    assert [(loss.name, loss()) for loss in losses] == [
        ("s/inner/e/part_0/Regularizer", 4.0), ("s/inner/e/part_1/Regularizer", 4.0), ("s/inner/b/Regularizer", 1.0)]
    assert outer.regularizer is count
    with store.variable_scope(outer):  # re-entered by object: its defaults again
        assert store.current_scope().partitioner is outer.partitioner


def test_custom_getters_compose_as_tf1(store):
    # TF1: def upper(getter, name, *args, **kwargs): return getter(name + "_u", *args, **kwargs)
    #      with variable_scope("a", custom_getter=upper):
    #        with variable_scope("b", custom_getter=lower): get_variable("v", [1])
    #      -> lower runs first, then upper, then the true getter: name "a/b/v_l_u"
    calls = []

    def upper(getter, name, *args, **kwargs):
        calls.append(("upper", name))
        return getter(name + "_u", *args, **kwargs)

    def lower(getter, name, *args, **kwargs):
        calls.append(("lower", name, kwargs["trainable"], kwargs["reuse"]))
        kwargs["trainable"] = False
        return getter(name + "_l", *args, **kwargs)

    with store.variable_scope("a", custom_getter=upper):
        with store.variable_scope("b", custom_getter=lower):
            v = store.get_variable("v", [1])
        w = store.get_variable("w", [1], custom_getter=lower)  # get_variable's own getter wraps the scope's
    assert calls == [("lower", "a/b/v", None, False), ("upper", "a/b/v_l"), ("lower", "a/w", None, False),
                     ("upper", "a/w_l")]
    assert (v.name, v.trainable, w.name) == ("a/b/v_l_u", False, "a/w_l_u")
    with pytest.raises(vs.VariableArgumentError, match="custom_getter"):
        with store.variable_scope("c", custom_getter="nope"):
            pass


def test_variable_scope_takes_values_positionally(store):
    # TF1 (slim): with tf.compat.v1.variable_scope(scope, "conv", [inputs]): the third argument is `values`
    with store.variable_scope(None, "conv", [np.zeros(2)]) as scope:
        store.get_variable("k", [1])
    assert scope.name == "conv"


def test_get_local_variable(store):
    # TF: tf.compat.v1.get_local_variable("step", [], initializer=tf.zeros_initializer()) -> in LOCAL_VARIABLES only,
    #     trainable False (even with trainable=True)
    with store.variable_scope("m"):
        pass
    vs.reset_default_store()
    step = vs.get_local_variable("step", [], dtype=np.int64, initializer=vs.zeros_initializer(), trainable=True)
    assert step.collections == (vs.LOCAL_VARIABLES,) and not step.trainable
    assert vs.local_variables() == [step] and vs.global_variables() == [] and vs.trainable_variables() == []


def test_assign_read_value_false_returns_none(store):
    # TF (eager): v.assign(2.0, read_value=False) -> None; the value changed
    v = vs.Variable(1.0, store=store)
    assert v.assign(2.0, read_value=False) is None
    assert v.assign_add(1.0, read_value=False) is None and v.assign_sub(0.5, read_value=False) is None
    assert v.numpy() == 2.5
    assert v.assign(3.0, use_locking=True, name="set") is v


def test_sliced_assignment(store):
    # TF: v = tf.Variable([1., 2., 3., 4.]); v[1].assign(9.); v[2:4].assign([7., 8.]); v.numpy() -> [1., 9., 7., 8.]
    v = vs.Variable([1.0, 2.0, 3.0, 4.0], store=store)
    assert v[1].assign(9.0) is v
    v[2:4].assign([7.0, 8.0])
    assert v.numpy().tolist() == [1.0, 9.0, 7.0, 8.0]
    m = vs.Variable(np.zeros((3, 2), np.float32), store=store)
    m[1].assign([5.0, 6.0])
    m[:, 0].assign([1.0, 2.0, 3.0])
    assert m.numpy().tolist() == [[1.0, 0.0], [2.0, 6.0], [3.0, 0.0]]
    # TF: v[0:2].assign(5.0) raises ("sliced l-value shape [2] does not match r-value shape []")
    with pytest.raises(vs.ShapeMismatchError):
        v[0:2].assign(5.0)
    piece = v[1:3]
    assert isinstance(piece, np.ndarray) and piece.tolist() == [9.0, 7.0]  # still a new array, not a view
    piece[0] = 0.0
    assert v.numpy()[1] == 9.0
    assert not hasattr(piece * 2, "assign")  # a result computed from a slice is a plain array
    with pytest.raises(TypeError, match="slice taken from a variable"):
        piece.copy().assign([1.0, 1.0])


def test_scatter_update(store):
    # TF: tf.compat.v1.scatter_update(ref, [0, 2], [[1., 1.], [3., 3.]]) on zeros (3, 2) -> [[1,1],[0,0],[3,3]]
    ref = vs.Variable(np.zeros((3, 2), np.float32), store=store)
    assert vs.scatter_update(ref, [0, 2], [[1.0, 1.0], [3.0, 3.0]]) is ref
    assert ref.numpy().tolist() == [[1.0, 1.0], [0.0, 0.0], [3.0, 3.0]]
    ref.scatter_update(1, [2.0, 2.0])
    assert ref.numpy()[1].tolist() == [2.0, 2.0]


def test_initial_value_and_get_shape(store):
    # TF1: v = tf.Variable([1., 2.]); v.assign([5., 5.]); sess.run(v.initial_value) -> [1., 2.];
    #      v.get_shape() -> TensorShape([2]) (a tuple here)
    v = vs.Variable([1.0, 2.0], store=store)
    v.assign([5.0, 5.0])
    assert v.initial_value.tolist() == [1.0, 2.0] and v.get_shape() == (2,)
    with pytest.raises(ValueError):
        v.initial_value[0] = 3.0  # read-only
    vs.set_random_seed(3)
    g = store.get_variable("g", [2, 2])
    first = g.numpy()
    g.assign(np.zeros((2, 2)))
    np.testing.assert_array_equal(g.initial_value, first)  # the seeded initializer's value again


def test_module_level_assign_functions(store):
    # TF: tf.compat.v1.assign(v, [3., 4.]); tf.compat.v1.assign_add(v, [1., 1.]); tf.compat.v1.assign_sub(v, [2., 2.])
    v = vs.Variable([0.0, 0.0], store=store)
    assert vs.assign(v, [3.0, 4.0]) is v
    assert vs.assign_add(v, [1.0, 1.0]) is v
    assert vs.assign_sub(v, [2.0, 2.0]) is v
    assert v.numpy().tolist() == [2.0, 3.0]
    with pytest.raises(vs.ShapeMismatchError, match="validate_shape"):
        vs.assign(v, [1.0, 2.0, 3.0], validate_shape=False)
