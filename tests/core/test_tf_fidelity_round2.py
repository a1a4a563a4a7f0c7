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
