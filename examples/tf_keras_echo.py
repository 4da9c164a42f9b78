"""Keras ``model.fit`` on a tf.data pipeline with example echoing before augmentation.

Trains a small classifier on Fashion-MNIST (Debian's ``dataset-fashion-mnist``), or on
scikit-learn's 8x8 digits with ``--fast``. Every example is echoed twice right after
it is read, a shuffle buffer spreads the copies apart, and each copy gets its own
random shift, so the model sees two views per fresh read. A Keras callback prints the
exact fresh and emitted counts of every epoch and their total.

Run: python examples/tf_keras_echo.py [--fast]
"""

from __future__ import annotations

import argparse
import os

os.environ.setdefault("KERAS_BACKEND", "tensorflow")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras
import numpy as np
import tensorflow as tf

import dataecho
import dataecho.tf
from dataecho.datasets import load_digits, load_fashion_mnist, split_train_test

SEED = 0
FACTOR = 2  # uses of each fresh read
BUFFER = 1024  # post-echo shuffle buffer, in examples
BATCH = 128


def load(fast: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    if fast:
        return split_train_test(*load_digits(), seed=SEED)
    x_train, y_train = load_fashion_mnist("train")
    x_test, y_test = load_fashion_mnist("test")
    return x_train / np.float32(255), y_train, x_test / np.float32(255), y_test


def augment(index: tf.Tensor, example: tuple[tf.Tensor, tf.Tensor]) -> tuple[tf.Tensor,
                                                                            tf.Tensor]:
    # Keyed by the position after the echo, so the two copies of an example get
    # different shifts and a rerun gets the same ones (stateless: exact resume too).
    image, label = example
    key = tf.random.experimental.stateless_fold_in(tf.constant([SEED, 1], tf.int64), index)
    shift = tf.random.stateless_uniform([2], seed=key, minval=-1, maxval=2, dtype=tf.int32)
    return tf.roll(image, shift, axis=[0, 1]), label


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--fast", action="store_true", help="the 8x8 digits, not Fashion-MNIST")
    parser.add_argument("--epochs", type=int, default=2)
    args = parser.parse_args()
    x_train, y_train, x_test, y_test = load(args.fast)

    stage = dataecho.tf.echo(FACTOR, seed=SEED, buffer_size=BUFFER)
    train = (tf.data.Dataset.from_tensor_slices((x_train.astype(np.float32), y_train))
             .shuffle(len(x_train), seed=SEED)
             .apply(stage)
             .enumerate().map(augment, num_parallel_calls=tf.data.AUTOTUNE)
             .batch(BATCH).prefetch(tf.data.AUTOTUNE))
    test = tf.data.Dataset.from_tensor_slices((x_test.astype(np.float32), y_test)).batch(512)

    init = keras.initializers.GlorotUniform(seed=SEED)
    model = keras.Sequential([
        keras.Input(x_train.shape[1:]),
        keras.layers.Flatten(),
        keras.layers.Dense(128, activation="relu", kernel_initializer=init),
        keras.layers.Dense(10, kernel_initializer=init),
    ])
    model.compile(optimizer=keras.optimizers.Adam(3e-3),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                  metrics=["accuracy"])
    epochs: list[dataecho.EchoStats] = []

    def report(epoch: int, logs: dict[str, float]) -> None:
        epochs.append(stage.stats())  # the counts of this epoch's pass
        print(f"epoch {epoch + 1}: loss {logs['loss']:.3f}; {epochs[-1]}")

    print(f"{stage} on {len(x_train):,} training examples")
    model.fit(train, epochs=args.epochs, shuffle=False, verbose=0,
              callbacks=[keras.callbacks.LambdaCallback(on_epoch_end=report)])
    print(f"{len(epochs)} epochs: {sum(epochs[1:], epochs[0])}")
    _, accuracy = model.evaluate(test, verbose=0)
    print(f"held-out accuracy {accuracy:.3f}")


if __name__ == "__main__":
    main()
