"""LARS with more parameters than MXNet's Updater chunk (4): after an lr change only the first chunk's momentum is
corrected (momentum * lr/last_lr), as in MXNet 1.9.1; migrate's LARS follows MXNet across those chunks."""
import migrate
from tests.migrate import _mx_reference as R

SCHEDULE = dict(R.SCHEDULE, step=3, base_lr=0.5)


def test_lars_chunks_follow_mxnet():
    """Six trainable parameters (two chunks), the lr halved every 3 steps: 10 steps agree within 1e-12 (float64)."""
    net = R.mx_net("float64")
    for param in net.collect_params().values():
        param.grad_req = "write"
    model = R.torch_net(net)
    data = R.batches(10, "float64")
    trainer = R.mx_trainer(net, "lars", {"learning_rate": 0.5, "momentum": 0.9, "eta": 0.1, "eps": 1e-8,
                                         "wd": 0.01}, SCHEDULE)
    R.mx_train(net, trainer, data)
    settings = R.exported_settings(trainer)
    assert sum(1 for entry in settings["params"].values() if not entry["frozen"]) == 6
    optimizer = migrate.torch_optimizer(model, settings, R.MAPPING)
    R.torch_train(model, optimizer, migrate.torch_lr_scheduler(optimizer, settings, num_update=0), data)
    worst_name, worst = R.largest_difference(R.weights_of(net), model)
    assert worst <= 1e-12, f"lars: {worst_name} differs by {worst:.3g}"
