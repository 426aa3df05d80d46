"""InMemoryDataset / QueueDataset (MultiSlot text) and Executor.train_from_dataset / infer_from_dataset.

Expected values are literals worked out by hand from the files written here,
NumPy formulas for SGD on ``mean(fc(x))`` (whose gradient does not depend on
the weights), or lines Paddle 3.3.1 printed (quoted with a comment).
"""
import re
import sys

import numpy as np
import pytest

import refimpl as paddle
from refimpl.core.errors import (ExecutionTimeout, External, InvalidArgument, NotFound, PreconditionNotMet,
                                 Unimplemented)
from refimpl.distributed.fleet.dataset import multi_slot
from refimpl.distributed.fleet.dataset.multi_slot import Slot, make_batch, parse_line

paddle.enable_static()

XY = [Slot("x", "float", (-1, 2)), Slot("y", "uint64", (-1, 1))]


def write(tmp_path, name, lines):
    path = tmp_path / name
    path.write_text("".join(line + "\n" for line in lines))
    return str(path)


def model(lr=0.1, w=0.5):
    """x [-1, 2] float32, y [-1, 1] int64, loss = mean(fc(x, 1)) with constant init, SGD(lr)."""
    main, startup = paddle.static.Program(), paddle.static.Program()
    with paddle.static.program_guard(main, startup):
        x = paddle.static.data("x", [-1, 2], "float32")
        y = paddle.static.data("y", [-1, 1], "int64")
        out = paddle.static.nn.fc(x, 1, weight_attr=paddle.ParamAttr(initializer=paddle.nn.initializer.Constant(w)))
        loss = paddle.mean(out)
        paddle.optimizer.SGD(lr).minimize(loss)
    scope = paddle.static.Scope()
    exe = paddle.static.Executor(paddle.CPUPlace())
    exe.run(startup, scope=scope)
    return main, x, y, loss, exe, scope


def param(scope, main, i):
    return np.array(scope.find_var(main.global_block().all_parameters()[i].name).get_tensor())


def sgd_on_mean_fc(batches, lr, w0, b0=0.0):
    """NumPy: SGD on mean(x @ w + b) over ``batches`` of x (gradient mean(x) and 1, whatever w is)."""
    w, b = np.full((2, 1), w0), b0
    for xb in batches:
        w = w - lr * xb.mean(axis=0).reshape(2, 1)
        b = b - lr * 1.0
    return w, b


# ---- the MultiSlot format ----------------------------------------------------------------------------

def test_parse_line_dense_float_and_int64_slots():
    x, y = parse_line("2 0.5 -1.25 1 7", XY, "here")
    assert x.dtype == np.float32 and x.tolist() == [0.5, -1.25]
    assert y.dtype == np.int64 and y.tolist() == [7]


@pytest.mark.parametrize("line, words", [
    ("2 0.5 1.5", "slot 'y' is missing"),
    ("2 0.5 1.5 1 3 9", "tokens after the last slot"),
    ("2 0.5 abc 1 3", "'abc', not a number"),
    ("2 0.5 1.5 1 1.5", "'1.5', not an integer"),
    ("2 0.5 1.5 0", "length 0"),
    ("3 0.5 1.5 2.5 1 3", "takes 2 values per instance, got 3"),
    ("2 0.5", "declares 2 values"),
])
def test_bad_lines_name_the_file_line_and_slot(tmp_path, line, words):
    path = write(tmp_path, "part-0", ["2 1 2 1 0", line])
    with pytest.raises(InvalidArgument) as err:
        list(multi_slot.read_instances(path, XY))
    assert "part-0" in str(err.value) and "line 2" in str(err.value) and words in str(err.value)


def test_blank_lines_are_skipped(tmp_path):
    path = write(tmp_path, "a", ["2 1 2 1 0", "", "2 3 4 1 1"])
    assert [i[1].tolist() for i in multi_slot.read_instances(path, XY)] == [[0], [1]]


def test_batches_take_the_variable_shape():
    insts = [parse_line(f"2 {i} {i + 0.5} 1 {i}", XY, "") for i in range(3)]
    feed = make_batch(insts, XY)
    assert feed["x"].shape == (3, 2) and feed["x"].dtype == np.float32
    assert feed["x"].tolist() == [[0, 0.5], [1, 1.5], [2, 2.5]]
    assert feed["y"].shape == (3, 1) and feed["y"].ravel().tolist() == [0, 1, 2]
    flat = [Slot("v", "float", (-1,))]
    assert make_batch([parse_line("3 1 2 3", flat, ""), parse_line("3 4 5 6", flat, "")], flat)["v"].shape == (6,)
    wide = [Slot("m", "float", (2, -1))]  # Paddle infers the one -1 dim from the number of values
    assert make_batch([parse_line("3 1 2 3", wide, ""), parse_line("3 4 5 6", wide, "")], wide)["m"].shape == (2, 3)


def test_use_var_checks_dtypes_and_repeats():
    main = paddle.static.Program()
    with paddle.static.program_guard(main, paddle.static.Program()):
        x = paddle.static.data("x", [-1, 2], "float64")
        y = paddle.static.data("y", [-1, 1], "int64")
    ds = paddle.distributed.QueueDataset()
    with pytest.raises(InvalidArgument, match="only supports dtype=float32 and dtype=int64"):
        ds.init(use_var=[x])
    with pytest.raises(InvalidArgument, match="appears twice"):
        ds.init(use_var=[y, y])
    with pytest.raises(InvalidArgument, match="unknown settings"):
        ds.init(batchsize=4)
    with pytest.raises(InvalidArgument, match="batch_size"):
        ds.init(batch_size=0)


def test_missing_file_is_not_found(tmp_path):
    with pytest.raises(NotFound, match="nope.txt"):
        list(multi_slot.read_instances(str(tmp_path / "nope.txt"), XY))


# ---- pipe commands -----------------------------------------------------------------------------------

def test_pipe_command_runs_without_a_shell(tmp_path):
    reader = tmp_path / "my reader.py"  # a space: shlex keeps the quoted path whole
    reader.write_text("import sys\nfor row in sys.stdin:\n    a, b, c = row.split(',')\n"
                      "    print(2, a, b, 1, c.strip())\n")
    path = write(tmp_path, "a.csv", ["1,2,3", "4,5,6"])
    cmd = f"{sys.executable} '{reader}'"
    got = [(x.tolist(), y.tolist()) for x, y in multi_slot.read_instances(path, XY, cmd)]
    assert got == [([1.0, 2.0], [3]), ([4.0, 5.0], [6])]


def test_pipe_command_failures_are_typed(tmp_path, monkeypatch):
    path = write(tmp_path, "a.txt", ["2 1 2 1 0"])
    fail = f"{sys.executable} -c \"import sys; sys.stderr.write('bad row 7'); sys.exit(3)\""
    with pytest.raises(External) as err:
        list(multi_slot.read_instances(path, XY, fail))
    assert "a.txt" in str(err.value) and "status 3" in str(err.value) and "bad row 7" in str(err.value)
    with pytest.raises(NotFound, match="no-such-program"):
        list(multi_slot.read_instances(path, XY, "no-such-program --flag"))
    with pytest.raises(InvalidArgument, match="without a shell"):
        list(multi_slot.read_instances(path, XY, "cat | grep 1"))
    monkeypatch.setattr(multi_slot, "PIPE_TIMEOUT_S", 0.5)
    with pytest.raises(ExecutionTimeout, match="a.txt"):
        list(multi_slot.read_instances(path, XY, f"{sys.executable} -c \"import time; time.sleep(5)\""))


def test_bad_line_after_pipe_names_the_command(tmp_path):
    path = write(tmp_path, "a.txt", ["2 1 2 1 0", "2 1 2"])
    with pytest.raises(InvalidArgument, match=r"a.txt.*through 'tac'.*line 1"):
        list(multi_slot.read_instances(path, XY, "tac"))


# ---- InMemoryDataset ---------------------------------------------------------------------------------

def in_memory(tmp_path, x, y, n=10, **settings):
    path = write(tmp_path, "part-0", [f"2 {i * 0.5} {i * 0.25} 1 {i % 3}" for i in range(n)])
    ds = paddle.distributed.InMemoryDataset()
    ds.init(use_var=[x, y], **settings)
    ds.set_filelist([path])
    return ds


def test_load_shuffle_release(tmp_path):
    _, x, y, *_ = model()
    ds = in_memory(tmp_path, x, y, batch_size=4)
    with pytest.raises(PreconditionNotMet, match="load_into_memory"):
        ds._reader_batches()
    ds.load_into_memory()
    assert ds.get_memory_data_size() == 10
    labels = [int(inst[1][0]) for inst in ds._memory]
    assert labels == [i % 3 for i in range(10)]  # file order
    paddle.seed(7)
    ds.local_shuffle()
    first = [float(inst[0][0]) for inst in ds._memory]
    assert sorted(first) == [i * 0.5 for i in range(10)] and first != [i * 0.5 for i in range(10)]
    ds.release_memory()
    assert ds.get_memory_data_size() == 0
    paddle.seed(7)
    ds.load_into_memory(is_shuffle=True)  # the same seed gives the same order
    assert [float(inst[0][0]) for inst in ds._memory] == first
    ds.preload_into_memory()
    ds.wait_preload_done()
    assert ds.get_memory_data_size() == 10


def test_train_from_dataset_matches_sgd_and_prints_as_paddle(tmp_path, capsys):
    main, x, y, loss, exe, scope = model(lr=0.1, w=0.5)
    ds = in_memory(tmp_path, x, y, batch_size=4)
    ds.load_into_memory()
    label = None
    with paddle.static.program_guard(main):
        label = paddle.mean(paddle.cast(y, "float32"))
    assert exe.train_from_dataset(main, ds, scope=scope, fetch_list=[loss, label, x],
                                  fetch_info=["loss", "label", "x"], print_period=1) is None
    xs = np.array([[i * 0.5, i * 0.25] for i in range(10)])
    w, b = sgd_on_mean_fc([xs[0:4], xs[4:8], xs[8:10]], 0.1, 0.5)
    np.testing.assert_allclose(param(scope, main, 0), w, rtol=1e-6)
    np.testing.assert_allclose(param(scope, main, 1), [b], rtol=1e-6)
    out = capsys.readouterr().out.splitlines()
    assert re.fullmatch(r"device worker program id: \d+", out[0])
    masked = [re.sub(r"time: \[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\]", "time: [<time>]", line) for line in out[1:]]
    # printed by Paddle 3.3.1 (FLAGS_enable_pir_api=0) for this data, model and call, time masked
    assert masked == [
        "time: [<time>], batch: [1], loss[1]:[0.5625], label[1]:[0.75], x[8]:[0 0 0.5 0.25 1 0.5 1.5 0.75]",
        "time: [<time>], batch: [2], loss[1]:[1.70469], label[1]:[1], x[8]:[2 1 2.5 1.25 3 1.5 3.5 1.75]",
        "time: [<time>], batch: [3], loss[1]:[1.12812], label[1]:[1], x[4]:[4 2 4.5 2.25]",
    ]
    exe.infer_from_dataset(main, ds, scope=scope, fetch_list=[label], fetch_info=["label"], print_period=2)
    out = capsys.readouterr().out.splitlines()
    assert len(out) == 2 and out[1].endswith("batch: [2], label[1]:[1]")


def test_two_readers_split_the_batches(tmp_path):
    main, x, y, loss, exe, scope = model(lr=0.5, w=0.1)
    ds = in_memory(tmp_path, x, y, n=9, batch_size=2, thread_num=2)
    ds.load_into_memory()
    readers = ds._reader_batches()
    assert [[f["y"].ravel().tolist() for f in r] for r in readers] == [[[0, 1], [1, 2], [2]], [[2, 0], [0, 1]]]
    exe.train_from_dataset(main, ds, scope=scope)
    xs = np.array([[i * 0.5, i * 0.25] for i in range(9)])
    w, b = sgd_on_mean_fc([xs[0:2], xs[2:4], xs[4:6], xs[6:8], xs[8:9]], 0.5, 0.1)
    np.testing.assert_allclose(param(scope, main, 0), w, rtol=1e-6)
    np.testing.assert_allclose(param(scope, main, 1), [b], rtol=1e-6)


# ---- QueueDataset and the executor's checks ---------------------------------------------------------

def test_queue_dataset_readers_and_files(tmp_path):
    main, x, y, loss, exe, scope = model(lr=0.5, w=0.1)
    files = [write(tmp_path, f"part-{k}", [f"2 {k} {i} 1 {k * 10 + i}" for i in range(3)]) for k in range(3)]
    ds = paddle.distributed.QueueDataset()
    ds.init(batch_size=2, thread_num=2, use_var=[x, y])
    ds.set_filelist(files)
    got = [[f["y"].ravel().tolist() for f in r] for r in ds._reader_batches()]
    # reader 0 reads part-0 and part-2 (its batches run on from one file into the next), reader 1 part-1
    assert got == [[[0, 1], [2, 20], [21, 22]], [[10, 11], [12]]]
    exe.train_from_dataset(main, ds, scope=scope)
    rows = lambda k, ii: np.array([[k, i] for i in ii], dtype=float)  # noqa: E731
    w, b = sgd_on_mean_fc([rows(0, [0, 1]), np.array([[0, 2], [2, 0]]), rows(2, [1, 2]), rows(1, [0, 1]),
                           rows(1, [2])], 0.5, 0.1)
    np.testing.assert_allclose(param(scope, main, 0), w, rtol=1e-6)
    np.testing.assert_allclose(param(scope, main, 1), [b], rtol=1e-6)


def test_a_bad_line_in_a_worker_thread_is_raised(tmp_path):
    main, x, y, loss, exe, scope = model()
    good = write(tmp_path, "good", ["2 1 2 1 0"] * 4)
    bad = write(tmp_path, "bad", ["2 1 2 1 0", "2 1 2 1 0", "2 1 oops 1 0"])
    ds = paddle.distributed.QueueDataset()
    ds.init(batch_size=1, thread_num=2, use_var=[x, y])
    ds.set_filelist([good, bad])
    with pytest.raises(InvalidArgument, match=r"bad.*line 3.*'oops'"):
        exe.train_from_dataset(main, ds, scope=scope)


def test_executor_checks_its_arguments(tmp_path):
    main, x, y, loss, exe, scope = model()
    ds = in_memory(tmp_path, x, y)
    ds.load_into_memory()
    with pytest.raises(PreconditionNotMet, match="dataset is need"):
        exe.train_from_dataset(main, None, scope=scope)
    with pytest.raises(InvalidArgument, match="InMemoryDataset or QueueDataset"):
        exe.train_from_dataset(main, object(), scope=scope)
    with pytest.raises(InvalidArgument, match="fetch_info needs one label"):
        exe.train_from_dataset(main, ds, scope=scope, fetch_list=[loss])
    with pytest.raises(InvalidArgument, match="print_period"):
        exe.train_from_dataset(main, ds, scope=scope, fetch_list=[loss], fetch_info=["l"], print_period=0)
    with pytest.raises(Unimplemented, match="fetch_handler"):
        exe.infer_from_dataset(main, ds, scope=scope, fetch_handler=lambda v: None)
    empty = paddle.distributed.QueueDataset()
    empty.init(use_var=[x, y])
    with pytest.raises(PreconditionNotMet, match="set_filelist"):
        exe.train_from_dataset(main, empty, scope=scope)


def test_paddle_names():
    from refimpl.distributed.fleet.dataset import dataset
    assert paddle.distributed.InMemoryDataset is dataset.InMemoryDataset
    assert paddle.distributed.QueueDataset is dataset.QueueDataset


# ---- paddle.base.DatasetFactory (the 1.x API) -------------------------------------------------------

def test_dataset_factory_public_setters(tmp_path):
    from refimpl.distributed.fleet.dataset.factory import DatasetFactory
    main, x, y, loss, exe, scope = model(lr=0.1, w=0.5)
    ds = DatasetFactory().create_dataset()
    ds.set_use_var([x])
    ds.set_batch_size(3)
    # printed by Paddle 3.3.1: base.DatasetFactory().create_dataset() after set_use_var([x]), set_batch_size(3)
    assert ds.desc() == ('name: "MultiSlotDataFeed"\nbatch_size: 3\nmulti_slot_desc {\n  slots {\n    name: "x"\n'
                         '    type: "float"\n    is_dense: true\n    is_used: true\n    shape: -1\n    shape: 2\n'
                         '  }\n}\npipe_command: "cat"\n')
    with pytest.raises(NotImplementedError, match="does not support local shuffle"):
        ds.local_shuffle()
    with pytest.raises(ValueError, match="datafeed class Nope does not exist"):
        DatasetFactory().create_dataset("Nope")
    mem = DatasetFactory().create_dataset("InMemoryDataset")
    mem.set_use_var([x, y])
    mem.set_batch_size(4)
    mem.set_thread(1)
    mem.set_pipe_command("cat")
    mem.set_filelist([write(tmp_path, "a", [f"2 {i} 1 1 0" for i in range(6)])])
    mem.load_into_memory()
    assert mem.get_memory_data_size() == 6
    exe.train_from_dataset(main, mem, scope=scope)
    xs = np.array([[i, 1.0] for i in range(6)])
    w, b = sgd_on_mean_fc([xs[0:4], xs[4:6]], 0.1, 0.5)
    np.testing.assert_allclose(param(scope, main, 0), w, rtol=1e-6)


# ---- review fixes: trainer sums, update_settings, preload twice, Paddle's missing legacy setters ----------

def test_memory_and_shuffle_sizes_sum_over_trainers_given_fleet(tmp_path):
    """Rank r loads r + 2 instances; with ``fleet`` every rank gets 2 + 3 + 4 = 9, without it its own."""
    from refimpl.distributed import fleet, run_in_process
    _, x, y, *_ = model()

    def body():
        fleet.init(is_collective=True)
        r = fleet.worker_index()
        ds = paddle.distributed.InMemoryDataset()
        ds.init(use_var=[x, y])
        ds.set_filelist([write(tmp_path, f"part-{r}", ["2 1 1 1 0"] * (r + 2))])
        ds.load_into_memory()
        return (ds.get_memory_data_size(), ds.get_memory_data_size(fleet), ds.get_shuffle_data_size(fleet),
                ds.get_memory_data_size(fleet.fleet))

    assert run_in_process(3, body) == [(r + 2, 9, 9, 9) for r in range(3)]


def test_update_settings_applies_or_refuses_hdfs_and_download(tmp_path):
    _, x, y, *_ = model()
    ds = in_memory(tmp_path, x, y)
    ds.update_settings(download_cmd="cat", fs_name="", fs_ugi="", batch_size=5)
    assert ds.batch_size == 5
    with pytest.raises(Unimplemented, match="download_cmd 'hadoop fs -cat'"):
        ds.update_settings(download_cmd="hadoop fs -cat")
    with pytest.raises(Unimplemented, match="HDFS"):
        ds.update_settings(fs_name="afs://x", fs_ugi="u,p")
    with pytest.raises(Unimplemented, match="HDFS"):
        ds.update_settings(fs_name="afs://x")
    with pytest.raises(InvalidArgument, match="unknown setting 'nope'"):
        ds.update_settings(batch_size=7, nope=1)
    assert ds.batch_size == 5  # nothing applied when a name is unknown


def test_preload_twice_without_waiting_is_precondition_not_met(tmp_path):
    _, x, y, *_ = model()
    ds = in_memory(tmp_path, x, y)
    ds.preload_into_memory()
    with pytest.raises(PreconditionNotMet, match="wait_preload_done"):
        ds.preload_into_memory()
    ds.wait_preload_done()
    ds.preload_into_memory()  # after waiting: allowed again
    ds.wait_preload_done()
    assert ds.get_memory_data_size() == 10


@pytest.mark.parametrize("kind, method", [("InMemoryDataset", "set_parse_ins_id"),
                                          ("InMemoryDataset", "set_merge_by_lineid"),
                                          ("InMemoryDataset", "set_fleet_send_sleep_seconds"),
                                          ("QueueDataset", "set_fea_eval")])
def test_paddles_legacy_setters_refimpl_lacks_are_unimplemented(kind, method):
    from refimpl.distributed.fleet.dataset.factory import DatasetFactory
    ds = DatasetFactory().create_dataset(kind)
    with pytest.raises(Unimplemented, match=f"{kind}.{method} is not implemented"):
        getattr(ds, method)
    with pytest.raises(AttributeError, match="no attribute 'set_not_in_paddle'"):
        ds.set_not_in_paddle
    if kind == "QueueDataset":  # an InMemoryDataset method Paddle's QueueDataset lacks too
        with pytest.raises(AttributeError):
            ds.set_parse_ins_id


def test_memory_stats_after_train_from_dataset_are_worker_0s_last_batch(tmp_path, capsys):
    """One reader, 8 instances in batches of 4: the stats are those of a plain run on the last batch."""
    main, x, y, loss, exe, scope = model()
    ds = in_memory(tmp_path, x, y, n=8, batch_size=4)
    ds.load_into_memory()
    runner = paddle.static.Executor(paddle.CPUPlace())
    runner.train_from_dataset(paddle.static.CompiledProgram(main), ds, scope=scope, fetch_list=[loss],
                              fetch_info=["loss"])
    got = runner.memory_stats()
    last = {"x": np.array([[i * 0.5, i * 0.25] for i in range(4, 8)], "float32"),
            "y": np.array([[i % 3] for i in range(4, 8)], "int64")}
    plain = paddle.static.Executor(paddle.CPUPlace())
    plain.run(main, feed=last, fetch_list=[loss], scope=scope)
    want = plain.memory_stats()
    # each category's own high-water mark may differ: the worker's scope still holds the previous
    # batch's fetched loss while the last batch starts, a fresh run's scope does not
    most, want_most = got.pop("max_by_category"), want.pop("max_by_category")
    assert got["peak_bytes"] > 0 and got == want
    loss_bytes = 4
    assert all(want_most[c] <= (most[c] or 0) <= (want_most[c] or 0) + loss_bytes for c in want_most
               if want_most[c] is not None)
