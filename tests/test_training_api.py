"""The CPU trainer's surface: keyword structures, steps, saving, resuming, bad input."""
import dataclasses

import numpy as np
import pytest

import uform

TEXT = uform.Modality.TEXT


def small_trainer(resume=None, objective=uform.Objective.JOINT, seed=1, **keywords):
    return uform.Trainer.init_ram(
        uform.Executor.for_ram(2), resume=resume, depth=2, hidden=64, objective=objective,
        batch=uform.BatchShape(max_rows_per_device=8, max_columns_per_row=64),
        schedule=uform.Schedule(learning_rate=3e-3, steps=100, warmup_steps=5), seed=seed, **keywords)


def batches(count, items=8, seed=0):
    rng = np.random.default_rng(seed)
    return [[bytes(rng.integers(97, 123, size=int(rng.integers(8, 40)), dtype=np.uint8))
             for _ in range(items)] for _ in range(count)]


def test_structures_are_immutable_keyword_only_and_ordered():
    shape = uform.BatchShape(max_rows_per_device=4, image=(16, 3), audio=uform.AudioShape(chunk_samples=400))
    assert shape.image == uform.ImageShape(patch_side=16, channels=3)
    assert [f.name for f in dataclasses.fields(uform.BatchShape)] == [
        "max_rows_per_device", "max_segments_per_device", "max_columns_per_row",
        "max_bags_per_device", "max_choices_per_item", "image", "video", "audio"]
    with pytest.raises(dataclasses.FrozenInstanceError):
        shape.max_rows_per_device = 5
    with pytest.raises(TypeError):
        uform.Masking(0.1)  # keyword-only
    assert [f.name for f in dataclasses.fields(uform.Contrastive)] == [
        "matryoshka_dimensions", "temperature_groups", "inverse_temperature", "bias", "negatives",
        "ambient_repulsion_weight", "max_edges_per_device", "pair_loss"]
    with pytest.raises(uform.InvalidArgumentError, match="max_rows_per_device"):
        uform.BatchShape(max_rows_per_device=-1)
    with pytest.raises(uform.InvalidArgumentError, match="pair_loss"):
        uform.Contrastive(pair_loss=9)
    relations = uform.Relations(attract=(np.zeros(3, np.uint64), np.zeros(0, np.uint32)))
    assert isinstance(relations.attract, uform.Edges)


def test_loss_falls_and_stats_report():
    trainer = small_trainer()
    stats = uform.TrainerStepStats()
    losses = []
    for batch in batches(25):
        trainer.step([TEXT] * 8, batch, bags=[0, 0, 1, 1, 2, 2, 3, 3], stats=stats)
        losses.append(stats.loss)
    assert stats.step == 25
    assert stats.loss == pytest.approx(stats.masked_text_loss + stats.contrastive_loss, rel=1e-5)
    assert np.mean(losses[-5:]) < np.mean(losses[:5])


def test_resume_continues_bit_for_bit(tmp_path):
    data = batches(6)
    first = small_trainer()
    for batch in data[:3]:
        first.step([TEXT] * 8, batch, bags=[0, 0, 1, 1, 2, 2, 3, 3])
    path = tmp_path / "middle.safetensors"
    first.save(path)
    resumed = small_trainer(resume=path)
    stats = uform.TrainerStepStats()
    for batch in data[3:]:
        first.step([TEXT] * 8, batch, bags=[0, 0, 1, 1, 2, 2, 3, 3], stats=stats)
        expected = stats.loss
        resumed.step([TEXT] * 8, batch, bags=[0, 0, 1, 1, 2, 2, 3, 3], stats=stats)
        assert stats.loss == expected
    for name in ("text.bytes", "blocks.1.mlp.up.weight", "heads.embedding.weight",
                 "contrastive.log_inverse_temperature"):
        for which in ("weights", "first_moment", "second_moment"):
            assert np.array_equal(first.tensor(name, which), resumed.tensor(name, which)), (name, which)


def test_saved_model_encodes_like_the_trainer(tmp_path):
    """The step answers the embeddings it scored with the weights it started from: save,
    then step, and Model.load_ram of the save must give the same embeddings (BF16 weights
    against FP32 masters: agreement to ~1e-2, DESIGN's BF16 tolerance)."""
    trainer = small_trainer(objective=uform.Objective.CONTRASTIVE)
    data = batches(4)
    for batch in data[:3]:
        trainer.step([TEXT] * 8, batch, bags=[0, 0, 1, 1, 2, 2, 3, 3])
    path = tmp_path / "model.safetensors"
    trainer.save(path)
    scored = np.array(trainer.step([TEXT] * 8, data[3], bags=[0, 0, 1, 1, 2, 2, 3, 3], arena=uform.Arena()))
    model = uform.Model.load_ram(path, cpu_class=uform.CPUClass.SERIAL)
    encoded = np.asarray(model.text_encode(data[3], uform.Arena()).embeddings)
    assert scored.shape == encoded.shape == (8, 64)
    np.testing.assert_allclose(encoded, scored, atol=3e-2)
    assert (encoded * scored).sum(axis=1).min() > 0.999


def test_packing_truncates_and_drops():
    trainer = uform.Trainer.init_ram(uform.Executor.for_ram(1), depth=1, hidden=64,
                                     objective=uform.Objective.CONTRASTIVE,
                                     batch=uform.BatchShape(max_rows_per_device=2, max_columns_per_row=16,
                                                            max_segments_per_device=3))
    stats = uform.TrainerStepStats()
    texts = [b"x" * 40, b"y" * 10, b"z" * 10, b"w" * 5, b"v" * 5]
    arena = uform.Arena()
    embeddings = np.asarray(trainer.step([TEXT] * 5, texts, bags=[0, 0, 1, 1, 2], arena=arena, stats=stats))
    # x cut to 16 fills row 0; y opens row 1 (10); z has no room (dropped); w fits row 1 (15);
    # v would be the 4th segment of 3 (dropped).
    assert stats.truncated == 1 and stats.dropped == 2
    assert np.all(embeddings[2] == 0) and np.all(embeddings[4] == 0)
    assert np.all(np.abs(np.linalg.norm(embeddings[[0, 1, 3]], axis=1) - 1) < 1e-5)
    trainer.step([TEXT] * 2, [b"a", b"b"], stats=stats)
    assert stats.truncated == 0 and stats.dropped == 0  # counts since the last read


def test_bad_step_input_leaves_the_trainer_usable():
    trainer = small_trainer()
    good = batches(1)[0]
    offsets = np.array([0] + [1] * 8, dtype=np.uint64)
    cases = [
        (dict(modalities=[TEXT] * 7), "modalities"),
        (dict(modalities=[9] * 8), "modality"),
        (dict(modalities=[uform.Modality.IMAGE] * 8), "no shape"),
        (dict(bags=[0] * 7), "bags"),
        (dict(bags=[-1] * 8), "bags"),
        (dict(temperature_groups=[5] * 8), "temperature_groups"),
        (dict(relations=uform.Relations(attract=(offsets, np.array([9], np.uint32)))), "names item"),
        (dict(relations=uform.Relations(attract=(offsets, np.array([1], np.uint32),
                                                 np.array([np.nan], np.float32)))), "weight"),
        (dict(relations=uform.Relations(repel=(offsets[:5], np.array([1], np.uint32)))), "offsets"),
        (dict(relations=uform.Relations(repel=(offsets, np.array([1], np.uint32),
                                               np.array([1, 2], np.float32)))), "weights"),
        (dict(relations=uform.Relations(repel=(offsets, np.array([1, 2], np.uint32)))), "ids"),
        (dict(relations=uform.Relations(repel=(offsets.astype(np.int32), np.array([1], np.uint32)))), "size_t"),
        (dict(outputs_scalar=42, arena=uform.Arena()), "outputs_scalar"),
    ]
    for keywords, pattern in cases:
        modalities = keywords.pop("modalities", [TEXT] * 8)
        with pytest.raises(uform.InvalidArgumentError, match=pattern):
            trainer.step(modalities, good, **keywords)
    with pytest.raises(uform.InvalidArgumentError, match="empty"):
        trainer.step([], [])
    with pytest.raises(uform.InvalidArgumentError, match="no choices configuration"):
        trainer.step([TEXT] * 8, good, choices=["ab"] * 8,
                     choice_targets=[np.array([0.5, 0.5], np.float32)] * 8)
    with pytest.raises(uform.InvalidArgumentError, match="no late_interaction"):
        trainer.step([TEXT] * 8, good, sides=[uform.LateInteractionSide.QUERY] * 8)
    stats = uform.TrainerStepStats()
    trainer.step([TEXT] * 8, good, stats=stats)
    assert stats.step == 1, "no failed call applied a step"


def test_bad_configuration():
    executor = uform.Executor.for_ram(1)
    with pytest.raises(uform.InvalidArgumentError, match="hidden"):
        uform.Trainer.init_ram(executor, hidden=100)
    with pytest.raises(uform.InvalidArgumentError, match="min_learning_rate"):
        uform.Trainer.init_ram(executor, schedule=uform.Schedule(learning_rate=1e-3, min_learning_rate=1e-2))
    with pytest.raises(uform.InvalidArgumentError, match="replace_fraction|random_fraction"):
        uform.Trainer.init_ram(executor, masking=uform.Masking(replace_fraction=0.9, random_fraction=0.5))
    with pytest.raises(uform.InvalidArgumentError, match="matryoshka"):
        uform.Trainer.init_ram(executor, objective=uform.Objective.CONTRASTIVE,
                               contrastive=uform.Contrastive(matryoshka_dimensions=[32, 32]))
    with pytest.raises(uform.InvalidArgumentError, match="late_interaction.weight"):
        uform.Trainer.init_ram(executor, late_interaction=uform.LateInteraction(weight=-1.0))
    with pytest.raises(uform.InvalidArgumentError, match="late_interaction.width"):
        uform.Trainer.init_ram(executor, late_interaction=uform.LateInteraction(width=1 << 20))
    with pytest.raises(uform.InvalidArgumentError, match="inverse_temperature"):
        uform.Trainer.init_ram(executor, late_interaction=uform.LateInteraction(inverse_temperature=float("inf")))
    with pytest.raises(uform.InvalidArgumentError, match="pair_loss"):
        uform.Trainer.init_ram(executor, late_interaction=uform.LateInteraction(pair_loss=9))
    with pytest.raises(uform.InvalidArgumentError, match="choices.weight"):
        uform.Trainer.init_ram(executor, choices=uform.Choices(weight=float("nan")))
    with pytest.raises(uform.InvalidArgumentError, match="max_choices_per_item"):
        uform.Trainer.init_ram(executor, choices=uform.Choices(),
                               batch=uform.BatchShape(max_choices_per_item=300))
    capabilities = uform.capabilities()
    if capabilities.gpus:   # a RAM executor cannot hold a VRAM trainer
        with pytest.raises(uform.InvalidArgumentError, match="RAM executor"):
            uform.Trainer.init_vram(executor)
    else:
        with pytest.raises((uform.UnsupportedError, uform.DeviceError), match="GPU"):
            uform.Trainer.init_vram(executor)
    with pytest.raises(uform.FileError):
        uform.Trainer.init_ram(executor, resume="/nonexistent/run.safetensors")
    with pytest.raises(uform.InvalidArgumentError, match="executor"):
        uform.Trainer.init_ram("cpu")
    with pytest.raises(uform.InvalidArgumentError, match="executor"):
        uform.Trainer.init_vram("gpu")


def test_two_replicas_step_like_one():
    """An executor with two memory domains trains data parallel: items split by token
    count, each replica packs its own rows, embeddings gathered for the contrastive term,
    gradients summed. Only the order of the weight-gradient sums differs from one replica,
    so losses and weights agree to FP32 rounding (1e-5 relative here)."""
    def run(executor):
        trainer = uform.Trainer.init_ram(
            executor, depth=2, hidden=64, objective=uform.Objective.JOINT,
            batch=uform.BatchShape(max_rows_per_device=8, max_columns_per_row=64),
            schedule=uform.Schedule(learning_rate=3e-3, steps=100, warmup_steps=2), seed=3)
        stats, losses = uform.TrainerStepStats(), []
        for batch in batches(3):
            trainer.step([TEXT] * 8, batch, bags=[0, 0, 1, 1, 2, 2, 3, 3], stats=stats)
            losses.append((stats.loss, stats.masked_text_loss, stats.contrastive_loss))
        return trainer, np.array(losses)

    one, one_losses = run(uform.Executor.for_ram(2))
    two, two_losses = run(uform.Executor.for_ram(2, memory_domains=[0, 1]))
    np.testing.assert_allclose(two_losses, one_losses, rtol=1e-5)
    for name in ("text.bytes", "blocks.0.attention.qkv.weight", "heads.embedding.weight"):
        np.testing.assert_allclose(two.tensor(name), one.tensor(name), rtol=1e-4, atol=1e-6)


def test_bags_per_device_limit_drops_items_of_new_bags():
    trainer = uform.Trainer.init_ram(uform.Executor.for_ram(1), depth=1, hidden=64,
                                     objective=uform.Objective.CONTRASTIVE,
                                     batch=uform.BatchShape(max_rows_per_device=4, max_columns_per_row=32,
                                                            max_bags_per_device=2))
    stats = uform.TrainerStepStats()
    embeddings = np.asarray(trainer.step([TEXT] * 5, [b"a", b"b", b"c", b"d", b"e"], bags=[7, 7, 8, 9, 8],
                                         arena=uform.Arena(), stats=stats))
    assert stats.dropped == 1                     # bag 9 would be the third
    assert np.all(embeddings[3] == 0) and np.all(np.abs(np.linalg.norm(embeddings[[0, 1, 2, 4]], axis=1) - 1) < 1e-5)


def test_bad_choices_and_sides_leave_the_trainer_usable():
    """Every malformed choice or side is an InvalidArgumentError naming it; the step after
    them applies normally."""
    trainer = uform.Trainer.init_ram(
        uform.Executor.for_ram(1), depth=1, hidden=64, objective=uform.Objective.JOINT,
        contrastive=uform.Contrastive(temperature_groups=3), choices=uform.Choices(temperature_groups=2),
        late_interaction=uform.LateInteraction(width=16),
        batch=uform.BatchShape(max_rows_per_device=8, max_columns_per_row=32, max_choices_per_item=3))
    texts = [b"is it? A or B", b"pick one", b"plain text", b"more text"]
    one = np.array([1.0], np.float32)
    two = np.array([0.25, 0.75], np.float32)
    none = np.zeros(0, np.float32)
    good = dict(choices=["AB", "xy", "", ""], choice_targets=[two, two, none, none])
    cases = [
        (dict(choices=["AA", "xy", "", ""], choice_targets=[two, two, none, none]), "given twice"),
        (dict(choices=["ABCD", "xy", "", ""], choice_targets=[np.ones(4, np.float32), two, none, none]),
         "max_choices_per_item"),
        (dict(choices=["AB", "xy", "", ""], choice_targets=[one, two, none, none]), "targets"),
        (dict(choices=["AB", "xy", "", ""], choice_targets=[two.astype(np.float64), two, none, none]), "float32"),
        (dict(choices=["AB", "xy", "", ""], choice_targets=[np.array([-1, 2], np.float32), two, none, none]),
         "finite"),
        (dict(choices=["AB", "xy", "", ""], choice_targets=[np.array([np.nan, 1], np.float32), two, none, none]),
         "finite"),
        (dict(choices=["Aé", "xy", "", ""], choice_targets=[two, two, none, none]), "single byte"),
        (dict(choices=[["A", "yes"], "xy", "", ""], choice_targets=[two, two, none, none]), "single byte"),
        (dict(choices=["AB", "xy", ""], choice_targets=[two, two, none]), "entries"),
        (dict(choices=["AB", "xy", "", ""]), "choice_targets"),
        (dict(choice_targets=[two, two, none, none]), "without choices"),
        (dict(good, temperature_groups=[2, 0, 0, 0]), "choice temperature groups"),
        (dict(good, temperature_groups=[0, 0, 0, 3]), "contrastive groups"),
        (dict(sides=[7, 0, 0, 0]), "LateInteractionSide"),
        (dict(sides=[1, 2]), "sides"),
    ]
    for keywords, pattern in cases:
        with pytest.raises(uform.InvalidArgumentError, match=pattern):
            trainer.step([TEXT] * 4, texts, **keywords)
    stats = uform.TrainerStepStats()
    trainer.step([TEXT] * 4, texts, sides=[uform.LateInteractionSide.QUERY, uform.LateInteractionSide.DOCUMENT,
                                         uform.LateInteractionSide.QUERY_AND_DOCUMENT,
                                         uform.LateInteractionSide.NONE], bags=[0, 0, 1, 2],
                 stats=stats, **good)
    assert stats.step == 1, "no failed call applied a step"
    assert stats.choices_loss > 0 and stats.late_interaction_loss > 0
