"""Writes seed files for the media fuzz targets: DIR/image, DIR/audio and
DIR/video, small real files of every kind the tests use, written by Pillow,
soundfile and PyAV (tests/media_fixtures.py), so no binary is committed.

    python3 fuzz/make_media_seeds.py DIR
"""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tests"))

import media_fixtures as fixtures  # noqa: E402


def main(directory: str) -> None:
    for kind in ("image", "audio", "video"):
        os.makedirs(os.path.join(directory, kind), exist_ok=True)
    picture = fixtures.test_picture(12, 10, seed=5)
    for kind in fixtures.IMAGE_KINDS:
        fixtures.write_image(os.path.join(directory, "image", kind), kind, picture)
    fixtures.write_png(os.path.join(directory, "image", "png-interlaced16"), picture.astype("uint16") * 257,
                       interlaced=True)
    for container, subtype, extension in fixtures.AUDIO_KINDS:
        path = os.path.join(directory, "audio", f"{subtype.lower()}.{extension}")
        fixtures.write_sound(path, container, subtype, 2, frames=600, rate=8000)
    for codec, container, extension in fixtures.VIDEO_KINDS:
        path = os.path.join(directory, "video", f"{codec}.{extension}")
        fixtures.write_clip(path, codec, container, frames=3, height=16, width=24)


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    main(sys.argv[1])
