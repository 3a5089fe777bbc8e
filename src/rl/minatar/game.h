// One MinAtar game (MinAtar 1.0.15's environments/*.py), re-implemented rule for rule. A game
// takes every random draw from the NumpyRandom it is given, in the reference's order.
#pragma once

#include <memory>

#include "src/rl/numpy_random.h"

namespace replicator::rl::minatar {

// The six actions every MinAtar game takes (the reference's action_map).
enum Action : int { kNoop = 0, kLeft = 1, kUp = 2, kRight = 3, kDown = 4, kFire = 5 };

class Game {
 public:
  virtual ~Game() = default;
  // Observation channels C of the 10 × 10 × C observation.
  virtual int channels() const = 0;
  // Starts a new episode (some games draw their start).
  virtual void reset(NumpyRandom& rng) = 0;
  // One step of the reference's act(a) while the game is not over; returns the reward.
  virtual int act(int action, NumpyRandom& rng) = 0;
  virtual bool over() const = 0;
  // True when the game ended by its clock rather than by the player's state (Freeway).
  virtual bool out_of_time() const { return false; }
  // Writes the observation into `obs`: 10 × 10 × channels() floats, already zeroed, at
  // obs[(row · 10 + column) · C + channel].
  virtual void observe(float* obs) const = 0;
};

std::unique_ptr<Game> make_breakout();
std::unique_ptr<Game> make_space_invaders(bool ramping);
std::unique_ptr<Game> make_freeway();
std::unique_ptr<Game> make_asterix(bool ramping);
std::unique_ptr<Game> make_seaquest(bool ramping);

// Sets cell (row, col) of channel c in an observation of C channels.
inline void set_cell(float* obs, int channels, int row, int col, int c) {
  obs[(row * 10 + col) * channels + c] = 1.0f;
}

}  // namespace replicator::rl::minatar
