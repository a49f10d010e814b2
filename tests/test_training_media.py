"""The CPU trainer on image, video and audio items against the PyTorch reference
(docs/training.md section 11): one step of captions with PNG images, a WebM clip and WAV
recordings, in every objective; the losses and every parameter's gradient match autograd in
float64.

The reference decodes the files with Pillow, PyAV and soundfile (tests/test_decode.py shows
libuform's decoders give the same pixels and samples on these formats) and tokenises them
with tests/reference/media.py (the oracle of the encode verbs). Tolerances are those of
tests/test_training_reference.py: losses to 1e-5 relative, each gradient to 2e-4 of its
tensor's largest reference gradient; the trainer computes in FP32 over chains of at most a
few hundred terms, so a wrong formula is off by O(1) of that scale, rounding by 1e-6.
"""
import io

import numpy as np
import pytest
import torch

import uform
import media_fixtures as fixtures
from reference import ReferenceModel
from reference.checkpoint import reference_from_trainer
from reference import media_training as mt
from reference import training as ref
from reference.model import BYTE_VALUES

TEXT, IMAGE, VIDEO, AUDIO = (uform.Modality.TEXT, uform.Modality.IMAGE, uform.Modality.VIDEO,
                             uform.Modality.AUDIO)
NAMES = {IMAGE: "image", VIDEO: "video", AUDIO: "audio"}
SEED = 7
COLUMNS = 32

pytestmark = pytest.mark.skipif(
    uform._lib.uform_media_formats() & (uform._lib.UFORM_MEDIA_PNG | uform._lib.UFORM_MEDIA_VIDEO |
                                        uform._lib.UFORM_MEDIA_AUDIO) !=
    (uform._lib.UFORM_MEDIA_PNG | uform._lib.UFORM_MEDIA_VIDEO | uform._lib.UFORM_MEDIA_AUDIO),
    reason="this build of libuform lacks the PNG, video or audio decoders (docs/decoding.md)")


def png(seed: int, height: int, width: int) -> bytes:
    from PIL import Image
    out = io.BytesIO()
    Image.fromarray(fixtures.test_picture(height, width, seed)).save(out, format="PNG")
    return out.getvalue()


def wav(frames: int, channels: int) -> bytes:
    import soundfile
    out = io.BytesIO()
    soundfile.write(out, fixtures.test_sound(frames, channels, 16000), 16000, format="WAV", subtype="FLOAT")
    return out.getvalue()


@pytest.fixture(scope="module")
def batch(tmp_path_factory):
    clip = tmp_path_factory.mktemp("clip") / "clip.webm"
    fixtures.write_clip(clip, "libvpx", "webm", frames=5, height=16, width=24)
    modalities = [TEXT, IMAGE, TEXT, AUDIO, TEXT, VIDEO, IMAGE, AUDIO, TEXT]
    contents = [b"a picture of noise", png(1, 24, 40), b"a low hum", wav(700, 2),
                b"moving shapes", clip.read_bytes(), png(2, 16, 16), wav(300, 1), b"silence"]
    bags = [0, 0, 1, 1, 2, 2, 3, 4, 4]
    return modalities, contents, bags


def make_trainer(objective):
    return uform.Trainer.init_ram(
        uform.Executor.for_ram(2), depth=2, hidden=64, objective=objective,
        batch=uform.BatchShape(max_rows_per_device=10, max_columns_per_row=COLUMNS,
                               image=uform.ImageShape(patch_side=8),
                               video=uform.VideoShape(patch_side=8, tube_frames=2),
                               audio=uform.AudioShape(chunk_samples=128, sample_rate=16000)),
        seed=SEED)


def reference_from(trainer, tmp_path) -> ReferenceModel:
    """The trainer's FP32 masters as a float64 reference model (through its own save)."""
    return reference_from_trainer(trainer, tmp_path)


def reference_losses(model, modalities, contents, bags, objective):
    masks = objective != uform.Objective.CONTRASTIVE
    table, bias = model.weight("text.bytes")[:BYTE_VALUES], None
    if masks:
        bias = model.weight("heads.bytes.bias")
    text_sum, text_count = torch.zeros((), dtype=torch.float64), 0
    media_sums = {m: torch.zeros((), dtype=torch.float64) for m in NAMES}
    media_counts = {m: 0 for m in NAMES}
    embeddings = []
    for item, (modality, data) in enumerate(zip(modalities, contents)):
        if modality == TEXT:
            original = list(data[:COLUMNS])
            ids, selected = (ref.mask_text(original, seed=SEED, step=1, item=item) if masks
                             else (original, [False] * len(original)))
            h = model.text_hidden(torch.tensor(ids, dtype=torch.long))
            rows = [t for t, s in enumerate(selected) if s]
            if rows:
                logits = h[rows] @ table.T + bias
                targets = torch.tensor([original[t] for t in rows])
                text_sum = text_sum + (torch.logsumexp(logits, -1) - logits.gather(1, targets[:, None])[:, 0]).sum()
                text_count += len(rows)
        else:
            name = NAMES[modality]
            inputs, positions = mt.item_tokens(name, data, model.config[name], COLUMNS)
            masked = (mt.masked_positions(len(inputs), 0.75, seed=SEED, step=1, item=item,
                                          stream=mt.STREAMS[name]) if masks else None)
            h = mt.media_hidden(model, name, inputs, positions, masked)
            if masks:
                total, count = mt.reconstruction_sum(model, name, h, inputs, masked)
                media_sums[modality] = media_sums[modality] + total
                media_counts[modality] += count
        embeddings.append(model.pool(h))
    losses = {"masked_text_loss": text_sum / text_count if text_count else text_sum}
    for m, name in NAMES.items():
        losses[f"masked_{name}_loss"] = media_sums[m] / media_counts[m] if media_counts[m] else media_sums[m]
    losses["contrastive_loss"] = torch.zeros((), dtype=torch.float64)
    if objective != uform.Objective.MASKED:
        losses["contrastive_loss"] = ref.contrastive_loss(
            torch.stack(embeddings), log_inverse_temperature=model.weight("contrastive.log_inverse_temperature"),
            bias=model.weight("contrastive.bias"), bags=bags)
    losses["loss"] = sum(losses.values())
    return losses, media_counts


@pytest.mark.parametrize("objective", [uform.Objective.JOINT, uform.Objective.MASKED,
                                       uform.Objective.CONTRASTIVE], ids=lambda o: o.name)
def test_media_losses_and_gradients_match_autograd(tmp_path, batch, objective):
    modalities, contents, bags = batch
    trainer = make_trainer(objective)
    model = reference_from(trainer, tmp_path)
    stats = uform.TrainerStepStats()
    trainer.step(modalities, contents, bags=bags, stats=stats)
    expected, counts = reference_losses(model, modalities, contents, bags, objective)
    if objective != uform.Objective.CONTRASTIVE:
        assert all(counts[m] > 0 for m in NAMES), "every modality has masked rows"
    assert stats.truncated == 0 and stats.dropped == 0
    for name, value in expected.items():
        assert getattr(stats, name) == pytest.approx(value.item(), rel=1e-5, abs=1e-6), name

    expected["loss"].backward()
    compared = set()
    for parameter_name, parameter in model.named_parameters():
        name = parameter_name.replace("__", ".")
        try:
            ours = trainer.tensor(name, "gradients").reshape(parameter.shape)
        except uform.InvalidArgumentError:
            continue
        reference = (parameter.grad if parameter.grad is not None else torch.zeros_like(parameter)).numpy()
        scale = max(np.abs(reference).max(), 1e-8)
        np.testing.assert_allclose(ours, reference, atol=2e-4 * scale, rtol=0, err_msg=f"gradient of {name}")
        compared.add(name)
    for name in NAMES.values():
        part = {"image": "image.patch", "video": "video.tube", "audio": "audio.chunk"}[name]
        assert {f"{name}.modality", f"{part}.weight", f"{part}.bias"} <= compared
        if objective != uform.Objective.CONTRASTIVE:
            assert {f"{name}.mask", f"heads.{name}.weight", f"heads.{name}.bias"} <= compared


def test_a_trained_media_checkpoint_encodes_like_the_trainer_saw_it(tmp_path, batch):
    """The saved checkpoint carries the media shapes; image_encode of a PNG through it agrees
    with the reference encoder on the saved weights (BF16 load: within BF16 rounding)."""
    modalities, contents, bags = batch
    trainer = make_trainer(uform.Objective.JOINT)
    trainer.step(modalities, contents, bags=bags)
    path = tmp_path / "trained.safetensors"
    trainer.save(path)
    loaded = uform.Model.load_ram(path, cpu_class=uform.CPUClass.SERIAL)
    encoded = np.asarray(loaded.image_encode((contents[1], np.array([0, len(contents[1])], np.uint64)),
                                             uform.Arena()).embeddings)[0]
    model = ReferenceModel.load(path)
    inputs, positions = mt.item_tokens("image", contents[1], model.config["image"], COLUMNS)
    expected = model.pool(mt.media_hidden(model, "image", inputs, positions)).detach().numpy()
    np.testing.assert_allclose(encoded, expected, atol=2e-5)   # FP32 SERIAL on the same BF16 weights


def test_media_items_need_their_shape_and_valid_files(batch):
    modalities, contents, bags = batch
    text_only = uform.Trainer.init_ram(uform.Executor.for_ram(1), depth=1, hidden=64,
                                       batch=uform.BatchShape(max_rows_per_device=10, max_columns_per_row=32))
    with pytest.raises(uform.InvalidArgumentError, match="no shape"):
        text_only.step(modalities, contents, bags=bags)
    trainer = make_trainer(uform.Objective.JOINT)
    broken = list(contents)
    broken[1] = contents[1][:40]
    with pytest.raises(uform.FormatError, match="contents"):
        trainer.step(modalities, broken, bags=bags)
    with pytest.raises(uform.InvalidArgumentError, match="channels"):
        uform.Trainer.init_ram(uform.Executor.for_ram(1),
                               batch=uform.BatchShape(image=uform.ImageShape(patch_side=8, channels=1)))
    stats = uform.TrainerStepStats()
    trainer.step(modalities, contents, bags=bags, stats=stats)
    assert stats.step == 1, "the failed step applied nothing"


def test_media_decoding_on_the_pool_does_not_depend_on_threads(batch):
    """Media items are decoded one per pool task (step_items.c): 1 and 3 threads give the
    same step bit for bit, and with two broken files the error names the first, as a
    serial loop would."""
    modalities, contents, bags = batch
    results = []
    for threads in (1, 3):
        trainer = uform.Trainer.init_ram(
            uform.Executor.for_ram(threads), depth=2, hidden=64, objective=uform.Objective.JOINT,
            batch=uform.BatchShape(max_rows_per_device=10, max_columns_per_row=COLUMNS,
                                   image=uform.ImageShape(patch_side=8),
                                   video=uform.VideoShape(patch_side=8, tube_frames=2),
                                   audio=uform.AudioShape(chunk_samples=128, sample_rate=16000)),
            seed=SEED)
        stats = uform.TrainerStepStats()
        embeddings = np.array(trainer.step(modalities, contents, bags=bags, arena=uform.Arena(), stats=stats))
        results.append((stats.loss, embeddings, trainer.tensor("norm.weight")))
        broken = list(contents)
        broken[3], broken[6] = contents[3][:30], contents[6][:40]
        with pytest.raises(uform.FormatError, match=r"files\[3\]"):
            trainer.step(modalities, broken, bags=bags)
    assert results[0][0] == results[1][0]
    assert np.array_equal(results[0][1], results[1][1]) and np.array_equal(results[0][2], results[1][2])
