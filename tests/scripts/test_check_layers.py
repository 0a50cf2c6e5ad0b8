#!/usr/bin/env python3
"""Tests of scripts/check_layers.py on tiny source trees made for each case.

Each case writes a few files whose paths PLACES knows (or, on purpose,
does not), runs the checker on that tree as CI does, and checks its exit
status and what it names. Standard library only; run by CTest
(scripts.check_layers_selftest) or directly.
"""

import os
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
CHECKER = os.path.join(HERE, "..", "..", "scripts", "check_layers.py")

# A tree that follows the layers: comm -> planner -> util, and qc.h.
CLEAN = {
    "include/qc.h": "",
    "src/core/status.h": '#include "qc.h"\n',
    "src/core/status.cpp": '#include "core/status.h"\n',
    "src/core/planner.h": '#include "core/status.h"\n',
    "src/core/planner.cpp": '#include "core/planner.h"\n#include "core/status.h"\n',
    "src/core/communicator.h": '#include "core/planner.h"\n',
    "src/core/communicator.cpp": '#include "core/communicator.h"\n',
    "src/core/codecs/codec.h": '#include "core/status.h"\n',
    "src/core/transports/transport.h": '#include "core/status.h"\n',
}


def run_checker(files):
    with tempfile.TemporaryDirectory() as root:
        for path, text in files.items():
            full = os.path.join(root, path)
            os.makedirs(os.path.dirname(full), exist_ok=True)
            with open(full, "w") as f:
                f.write(text)
        done = subprocess.run([sys.executable, CHECKER, "--root", root],
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              universal_newlines=True)
        return done.returncode, done.stdout


class CheckLayersTest(unittest.TestCase):
    def test_a_tree_that_follows_the_layers_passes(self):
        rc, out = run_checker(CLEAN)
        self.assertEqual(rc, 0, out)
        self.assertIn("all down the layers and acyclic", out)

    def test_an_include_up_the_layers_fails_naming_file_include_and_layers(self):
        files = dict(CLEAN)
        files["src/core/codecs/codec.cpp"] = '#include "core/codecs/codec.h"\n#include "core/planner.h"\n'
        rc, out = run_checker(files)
        self.assertEqual(rc, 1, out)
        self.assertIn('src/core/codecs/codec.cpp:2: #include "core/planner.h" goes up the layers: '
                      "src/core/codecs/codec.cpp is in layer 'codecs', src/core/planner.h in "
                      "layer 'planner' above it", out)
        self.assertIn("1 problem(s)", out)

    def test_an_include_cycle_fails_naming_every_include_on_it(self):
        files = dict(CLEAN)
        files["src/core/codecs/codec_a.h"] = '#include "core/codecs/codec.h"\n'
        # codec.cpp includes codec_a.h, which includes codec.h: modules
        # codec -> codec_a -> codec, all in one layer.
        files["src/core/codecs/codec.cpp"] = '#include "core/codecs/codec_a.h"\n'
        rc, out = run_checker(files)
        self.assertEqual(rc, 1, out)
        self.assertIn("include cycle src/core/codecs/codec -> src/core/codecs/codec_a -> "
                      "src/core/codecs/codec", out)
        self.assertIn('src/core/codecs/codec.cpp:1 includes "core/codecs/codec_a.h"', out)
        self.assertIn('src/core/codecs/codec_a.h:1 includes "core/codecs/codec.h"', out)
        self.assertNotIn("goes up", out)

    def test_a_cycle_through_an_upward_include_is_reported_twice(self):
        files = dict(CLEAN)
        files["src/core/planner.cpp"] = '#include "core/planner.h"\n#include "core/communicator.h"\n'
        rc, out = run_checker(files)
        self.assertEqual(rc, 1, out)
        self.assertIn("goes up the layers", out)
        self.assertIn("include cycle src/core/communicator -> src/core/planner -> "
                      "src/core/communicator", out)

    def test_an_include_beside_its_layer_fails(self):
        files = dict(CLEAN)
        files["src/core/codecs/codec.h"] = '#include "core/transports/transport.h"\n'
        rc, out = run_checker(files)
        self.assertEqual(rc, 1, out)
        self.assertIn("goes sideways", out)
        self.assertIn("layer 'codecs'", out)
        self.assertIn("layer 'transports'", out)

    def test_a_file_the_table_does_not_place_fails(self):
        files = dict(CLEAN)
        files["src/core/somewhere_new.cpp"] = '#include "core/status.h"\n'
        rc, out = run_checker(files)
        self.assertEqual(rc, 1, out)
        self.assertIn("src/core/somewhere_new.cpp: not placed in a layer", out)

    def test_an_include_of_no_file_fails(self):
        files = dict(CLEAN)
        files["src/core/status.cpp"] = '#include "core/status.h"\n#include "core/gone.h"\n'
        rc, out = run_checker(files)
        self.assertEqual(rc, 1, out)
        self.assertIn('src/core/status.cpp:2: #include "core/gone.h" names no file', out)

    def test_a_root_without_src_is_a_usage_error(self):
        with tempfile.TemporaryDirectory() as root:
            done = subprocess.run([sys.executable, CHECKER, "--root", root],
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        self.assertEqual(done.returncode, 2)


if __name__ == "__main__":
    unittest.main()
