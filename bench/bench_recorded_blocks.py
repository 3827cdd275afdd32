"""Real plain-Block models generated from what MXNet records: Sockeye 2.3's SockeyeModel and GluonTS 0.17's DeepState
prediction network (the libraries are not dependencies of gluon-lr: install them aside, without their dependencies).

Run:
    pip install --target /tmp/recorded --no-deps sockeye==2.3.24 portalocker gluonts==0.17.0 pandas==2.0.3 \\
        python-dateutil pytz six toolz
    OMP_NUM_THREADS=2 PYTHONPATH=.:/tmp/recorded python bench/bench_recorded_blocks.py

Prints one table. SockeyeModel (a transformer of 2 layers, model size 16, 2 heads, vocabulary 20, weights tied
source/target/softmax, random init, hybridized as Sockeye trains it): generated from the Block itself (recorded on
ones of the shapes), its logits in eval and train mode (dropout 0) and every parameter gradient (seeded head
gradients) against MXNet's, as the largest relative difference; then verify against the generated module (nodes
compared and skipped). DeepState's prediction network (a HybridBlock whose hybrid_forward calls ``bool()`` on a value,
so it does not trace): recorded on one batch by ``record_block``; it draws torch's random numbers, so 20 calls of
each side (2000 sample paths per series and step) are compared by the largest |difference of means| / standard error
and the range of the ratio of standard deviations; the notes name the data-dependent reads.
"""
import inspect
import logging
import sys
import warnings

import numpy as np

warnings.filterwarnings("ignore")
logging.disable(logging.INFO)


def _relative(want, got) -> float:
    return float(np.abs(want - got).max() / max(np.abs(want).max(), 1e-12))


def _sockeye_model():
    import mxnet as mx
    from sockeye import constants as C
    from sockeye import data_io, encoder, model, transformer
    vocab, size, length = 20, 16, 12

    def config(depth_key_value=0):
        return transformer.TransformerConfig(
            model_size=size, attention_heads=2, feed_forward_num_hidden=32, act_type="relu", num_layers=2,
            dropout_attention=0.0, dropout_act=0.0, dropout_prepost=0.0, positional_embedding_type="fixed",
            preprocess_sequence="n", postprocess_sequence="dr", max_seq_len_source=length,
            max_seq_len_target=length, depth_key_value=depth_key_value)
    stats = data_io.DataStatistics(
        num_sents=1, num_discarded=0, num_tokens_source=1, num_tokens_target=1, num_unks_source=0, num_unks_target=0,
        max_observed_len_source=length, max_observed_len_target=length, size_vocab_source=vocab,
        size_vocab_target=vocab, length_ratio_mean=1.0, length_ratio_std=0.1, buckets=[(length, length)],
        num_sents_per_bucket=[1], average_len_target_per_bucket=[None])
    data = data_io.DataConfig(data_statistics=stats, max_seq_len_source=length, max_seq_len_target=length,
                              num_source_factors=1, num_target_factors=1)
    embed = encoder.EmbeddingConfig(vocab_size=vocab, num_embed=size, dropout=0.0)
    net = model.SockeyeModel(model.ModelConfig(
        config_data=data, vocab_source_size=vocab, vocab_target_size=vocab, config_embed_source=embed,
        config_embed_target=embed, config_encoder=config(), config_decoder=config(size),
        weight_tying_type=C.WEIGHT_TYING_SRC_TRG_SOFTMAX))
    mx.random.seed(0)
    net.initialize(mx.init.Xavier(magnitude=2.0))
    rng = np.random.RandomState(0)
    inputs = [rng.randint(1, vocab, (2, 7, 1)).astype(np.float32), np.array([7, 5], np.float32),
              rng.randint(1, vocab, (2, 6, 1)).astype(np.float32), np.array([6, 5], np.float32)]
    net.hybridize(static_alloc=True)
    net(*[mx.nd.array(x) for x in inputs])
    return net, inputs


def sockeye_row(folder: str) -> str:
    import mxnet as mx
    import torch

    import migrate
    from migrate.generate import generate_torch
    from migrate.mapping.generated_mapping import generated_mapping
    from migrate.source import model_source
    net, inputs = _sockeye_model()
    shapes = [x.shape for x in inputs]
    source = model_source(net, shapes, [np.float32] * 4)
    model = generate_torch(source, shapes, f"{folder}/sockeye_model.py")
    worst = {}
    for train in (False, True):
        with mx.autograd.record(train_mode=train):
            logits = net(*[mx.nd.array(x) for x in inputs])["logits"]
        head = np.random.RandomState(5).standard_normal(logits.shape).astype(np.float32)
        logits.backward(mx.nd.array(head))
        model.train(train)
        model.zero_grad()
        got = model(*[torch.from_numpy(x) for x in inputs])
        got.backward(torch.from_numpy(head))
        worst[f"logits {'train' if train else 'eval'}"] = _relative(logits.asnumpy(), got.detach().numpy())
        named = dict(model.named_parameters())
        grads = [_relative(p.grad().asnumpy(), named[model.MXNET_NAMES[n]].grad.numpy())
                 for n, p in net.collect_params().items() if p.grad_req != "null"]
        worst["gradients"] = max(worst.get("gradients", 0.0), *grads)
    report = migrate.verify(source, model, generated_mapping(source, model), shapes)
    return (f"| Sockeye 2.3 SockeyeModel (2+2 layers, 16 units) | logits {worst['logits eval']:.2g} eval, "
            f"{worst['logits train']:.2g} train; {len(grads)} gradients within {worst['gradients']:.2g} | verify: "
            f"{len(report.rows) - len(report.skipped)} of {len(report.rows)} nodes compared, ok={report.ok}, final "
            f"{report.max_abs_diff:.2g} | {len(source.notes) - 1} notes besides 'recorded' |")


def _deepstate():
    import mxnet as mx
    import pandas as pd
    from gluonts.dataset.common import ListDataset
    from gluonts.dataset.loader import InferenceDataLoader
    from gluonts.mx.batchify import batchify
    from gluonts.mx.model import deepstate
    from gluonts.mx.trainer import Trainer
    from gluonts.transform import Identity
    rng = np.random.RandomState(0)
    data = ListDataset([{"start": pd.Period("2020-01-01", freq="H"), "target": rng.uniform(1, 5, 80).astype(np.float32),
                         "feat_static_cat": [i]} for i in range(4)], freq="H")
    estimator = deepstate.DeepStateEstimator(freq="H", prediction_length=6, past_length=12, cardinality=[4],
                                             use_feat_static_cat=True, num_layers=1, num_cells=8, batch_size=4,
                                             trainer=Trainer(epochs=1, num_batches_per_epoch=1))
    transformation = estimator.create_transformation()
    training = estimator.create_training_network()
    training.initialize(mx.init.Xavier())
    batch = next(iter(estimator.create_training_data_loader(transformation.apply(data, is_train=True))))
    names = [p for p in inspect.signature(training.hybrid_forward).parameters if p in batch]
    training(*[mx.nd.array(batch[n]) for n in names])
    predictor = estimator.create_predictor(transformation, training)
    net = predictor.prediction_net
    loader = InferenceDataLoader(predictor.input_transform.apply(data, is_train=False), transform=Identity(),
                                 batch_size=4, stack_fn=lambda b: batchify(b, dtype=np.float32))
    batch = next(iter(loader))
    names = [p for p in inspect.signature(net.hybrid_forward).parameters if p in batch]
    return net, [batch[n] if isinstance(batch[n], mx.nd.NDArray) else mx.nd.array(batch[n]) for n in names]


def deepstate_row(folder: str) -> str:
    import mxnet as mx
    import torch

    from migrate.generate import generate_torch
    from migrate.source import record_block
    net, inputs = _deepstate()
    source = record_block(net, inputs)
    model = generate_torch(source, [x.shape for x in inputs], f"{folder}/deepstate.py").eval()
    mx.random.seed(1)
    torch.manual_seed(1)
    want = np.concatenate([net(*inputs).asnumpy() for _ in range(20)], axis=1)
    with torch.no_grad():
        got = np.concatenate([model(*[torch.from_numpy(x.asnumpy()) for x in inputs]).numpy() for _ in range(20)],
                             axis=1)
    error = np.sqrt(want.var(axis=1) / want.shape[1] + got.var(axis=1) / got.shape[1])
    z = np.abs(want.mean(axis=1) - got.mean(axis=1)) / error
    ratio = got.std(axis=1) / want.std(axis=1)
    reads = [n for n in source.notes if n.startswith("data-dependent")]
    return (f"| GluonTS 0.17 DeepState prediction network (4 series, 6 steps, 100 paths) | means within "
            f"{z.max():.2g} standard errors, std ratio {ratio.min():.3f} to {ratio.max():.3f} (2000 paths each) | "
            f"{len(source.constants)} constants, {sum(n['op'] == 'BlockGrad' for n in source.document['nodes'])} "
            f"BlockGrad after autograd.pause | {len(reads)} data-dependent note: "
            f"{reads[0].split(' at ')[1].split(';')[0] if reads else '-'} |")


def main() -> None:
    import tempfile
    print("| model | against MXNet | graph | notes |")
    print("|---|---|---|---|")
    with tempfile.TemporaryDirectory() as folder:
        for name, row in (("sockeye", sockeye_row), ("gluonts", deepstate_row)):
            try:
                __import__(name)
            except ImportError:
                print(f"| {name} | not installed (see the module docstring) | | |", file=sys.stdout)
                continue
            print(row(folder), flush=True)


if __name__ == "__main__":
    main()
