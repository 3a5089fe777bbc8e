// Seaquest: a submarine shoots enemy fish and subs (+1 each), rescues divers, and must
// surface before its oxygen runs out; surfacing with six divers pays the remaining oxygen
// (up to 10) and, with ramping, speeds the enemies up. Game over on touching an enemy or an
// enemy bullet, running out of oxygen, or surfacing without a diver.
// Channels: sub front, sub back, friendly bullet, trail, enemy bullet, enemy fish, enemy
// sub, oxygen gauge, diver gauge, diver.
//
// The reference keeps its objects in Python lists, walks most of them back to front while
// removing from them, and removes by value (the first equal element). Those mechanics decide
// rare outcomes (two equal fish, an enemy sub that fires on the step it leaves the screen),
// so they are kept: objects live in a pool, lists hold indices into it, remove() drops the
// first element with equal fields, and a back-to-front walk stops as Python's reversed
// iterator does.
#include <algorithm>
#include <array>
#include <cstdint>
#include <vector>

#include "src/rl/minatar/game.h"

namespace replicator::rl::minatar {
namespace {

constexpr int kMaxOxygen = 200;
constexpr int kInitSpawnSpeed = 20;
constexpr int kDiverSpawnSpeed = 30;
constexpr int kInitMoveInterval = 5;
constexpr int kShotCoolDown = 5;
constexpr int kEnemyShotInterval = 10;
constexpr int kDiverMoveInterval = 5;

// Python's floor division.
int floor_div(int a, int b) { return a / b - ((a % b != 0) && ((a < 0) != (b < 0))); }

// One list element: [x, y, right] then, for fish and divers, a move timer, and for enemy
// subs a shot timer too. `n` is the number of fields the reference's list holds.
struct Object {
  std::array<int, 5> f{};
  int n = 0;
  int& x() { return f[0]; }
  int& y() { return f[1]; }
  bool right() const { return f[2] != 0; }
  bool operator==(const Object& o) const {
    return n == o.n && std::equal(f.begin(), f.begin() + n, o.f.begin());
  }
};

class ObjectList {
 public:
  explicit ObjectList(std::vector<Object>* pool) : pool_(pool) {}
  std::vector<int>& items() { return items_; }
  const std::vector<int>& items() const { return items_; }
  void clear() { items_.clear(); }
  void append(const Object& o) {
    pool_->push_back(o);
    items_.push_back(static_cast<int>(pool_->size() - 1));
  }
  // list.remove(value): the first element equal to the object at index `handle`.
  void remove(int handle) {
    const Object& value = (*pool_)[static_cast<std::size_t>(handle)];
    for (std::size_t j = 0; j < items_.size(); ++j) {
      if ((*pool_)[static_cast<std::size_t>(items_[j])] == value) {
        items_.erase(items_.begin() + static_cast<std::ptrdiff_t>(j));
        return;
      }
    }
  }
  // for item in reversed(list): each step reads index i if 0 <= i < len, else stops.
  template <typename Fn>
  void for_each_reversed(Fn&& fn) {
    std::ptrdiff_t i = static_cast<std::ptrdiff_t>(items_.size()) - 1;
    while (i >= 0 && i < static_cast<std::ptrdiff_t>(items_.size())) {
      const int handle = items_[static_cast<std::size_t>(i)];
      --i;
      fn(handle);
    }
  }

 private:
  std::vector<Object>* pool_;
  std::vector<int> items_;
};

class Seaquest final : public Game {
 public:
  explicit Seaquest(bool ramping)
      : ramping_(ramping),
        f_bullets_(&pool_),
        e_bullets_(&pool_),
        e_fish_(&pool_),
        e_subs_(&pool_),
        divers_(&pool_) {}
  int channels() const override { return 10; }

  void reset(NumpyRandom&) override {
    oxygen_ = kMaxOxygen;
    diver_count_ = 0;
    sub_x_ = 5;
    sub_y_ = 0;
    sub_right_ = false;
    pool_.clear();
    for (ObjectList* list : lists()) list->clear();
    e_spawn_speed_ = kInitSpawnSpeed;
    e_spawn_timer_ = e_spawn_speed_;
    d_spawn_timer_ = kDiverSpawnSpeed;
    move_speed_ = kInitMoveInterval;
    ramp_index_ = 0;
    shot_timer_ = 0;
    surface_ = true;
    over_ = false;
  }

  int act(int action, NumpyRandom& rng) override {
    int reward = 0;
    if (e_spawn_timer_ == 0) {
      spawn_enemy(rng);
      e_spawn_timer_ = e_spawn_speed_;
    }
    if (d_spawn_timer_ == 0) {
      spawn_diver(rng);
      d_spawn_timer_ = kDiverSpawnSpeed;
    }
    if (action == kFire && shot_timer_ == 0) {
      f_bullets_.append(make({sub_x_, sub_y_, sub_right_}));
      shot_timer_ = kShotCoolDown;
    } else if (action == kLeft) {
      sub_x_ = std::max(0, sub_x_ - 1);
      sub_right_ = false;
    } else if (action == kRight) {
      sub_x_ = std::min(9, sub_x_ + 1);
      sub_right_ = true;
    } else if (action == kUp) {
      sub_y_ = std::max(0, sub_y_ - 1);
    } else if (action == kDown) {
      sub_y_ = std::min(8, sub_y_ + 1);
    }

    update_friendly_bullets(reward);
    update_divers();
    update_enemies(e_subs_, true, reward);
    update_enemy_bullets();
    update_enemies(e_fish_, false, reward);

    if (e_spawn_timer_ > 0) e_spawn_timer_ -= 1;
    if (d_spawn_timer_ > 0) d_spawn_timer_ -= 1;
    if (shot_timer_ > 0) shot_timer_ -= 1;
    if (oxygen_ <= 0) over_ = true;
    if (sub_y_ > 0) {
      oxygen_ -= 1;
      surface_ = false;
    } else if (!surface_) {
      if (diver_count_ == 0) {
        over_ = true;
      } else {
        reward += surface();
      }
    }
    compact();
    return reward;
  }

  bool over() const override { return over_; }

  void observe(float* obs) const override {
    auto set = [obs](int row, int col, int c) { set_cell(obs, 10, row, col, c); };
    set(sub_y_, sub_x_, 0);
    const int back_x = sub_right_ ? sub_x_ - 1 : sub_x_ + 1;
    set(sub_y_, (back_x + 10) % 10, 1);  // a numpy index of -1 is the last column
    const int gauge = floor_div(std::max(0, oxygen_) * 10, kMaxOxygen);
    for (int c = 0; c < std::min(gauge, 10); ++c) set(9, c, 7);
    for (int c = std::max(0, 9 - diver_count_); c < 9; ++c) set(9, c, 8);
    auto draw = [this, &set](const ObjectList& list, int channel, bool trail) {
      for (int handle : list.items()) {
        const Object& o = pool_[static_cast<std::size_t>(handle)];
        set(o.f[1], o.f[0], channel);
        const int back = o.right() ? o.f[0] - 1 : o.f[0] + 1;
        if (trail && back >= 0 && back <= 9) set(o.f[1], back, 3);
      }
    };
    draw(f_bullets_, 2, false);
    draw(e_bullets_, 4, false);
    draw(e_fish_, 5, true);
    draw(e_subs_, 6, true);
    draw(divers_, 9, true);
  }

 private:
  static Object make(std::initializer_list<int> fields) {
    Object o;
    for (int v : fields) o.f[static_cast<std::size_t>(o.n++)] = v;
    return o;
  }
  Object& at(int handle) { return pool_[static_cast<std::size_t>(handle)]; }
  bool at_sub(int handle) { return at(handle).x() == sub_x_ && at(handle).y() == sub_y_; }
  static bool same_cell(const Object& a, const Object& b) {
    return a.f[0] == b.f[0] && a.f[1] == b.f[1];
  }
  std::array<ObjectList*, 5> lists() {
    return {&f_bullets_, &e_bullets_, &e_fish_, &e_subs_, &divers_};
  }

  void update_friendly_bullets(int& reward) {
    f_bullets_.for_each_reversed([&](int bullet) {
      at(bullet).x() += at(bullet).right() ? 1 : -1;
      if (at(bullet).x() < 0 || at(bullet).x() > 9) {
        f_bullets_.remove(bullet);
        return;
      }
      for (ObjectList* targets : {&e_fish_, &e_subs_}) {
        for (int target : targets->items()) {
          if (same_cell(at(bullet), at(target))) {
            targets->remove(target);
            f_bullets_.remove(bullet);
            reward += 1;
            return;
          }
        }
      }
    });
  }

  void update_divers() {
    divers_.for_each_reversed([&](int diver) {
      if (at_sub(diver) && diver_count_ < 6) {
        divers_.remove(diver);
        diver_count_ += 1;
        return;
      }
      Object& d = at(diver);
      if (d.f[3] == 0) {
        d.f[3] = kDiverMoveInterval;
        d.x() += d.right() ? 1 : -1;
        if (d.x() < 0 || d.x() > 9) {
          divers_.remove(diver);
        } else if (at_sub(diver) && diver_count_ < 6) {
          divers_.remove(diver);
          diver_count_ += 1;
        }
      } else {
        d.f[3] -= 1;
      }
    });
  }

  // Enemy subs and fish: move, leave the screen, hit the player or run into a friendly
  // bullet. A sub then counts down to its next shot even if it just left the list.
  void update_enemies(ObjectList& list, bool subs, int& reward) {
    list.for_each_reversed([&](int enemy) {
      if (at_sub(enemy)) over_ = true;
      if (at(enemy).f[3] == 0) {
        at(enemy).f[3] = move_speed_;
        at(enemy).x() += at(enemy).right() ? 1 : -1;
        if (at(enemy).x() < 0 || at(enemy).x() > 9) {
          list.remove(enemy);
        } else if (at_sub(enemy)) {
          over_ = true;
        } else {
          for (int bullet : f_bullets_.items()) {
            if (same_cell(at(enemy), at(bullet))) {
              list.remove(enemy);
              f_bullets_.remove(bullet);
              reward += 1;
              break;
            }
          }
        }
      } else {
        at(enemy).f[3] -= 1;
      }
      if (!subs) return;
      if (at(enemy).f[4] == 0) {
        at(enemy).f[4] = kEnemyShotInterval;
        const Object& s = at(enemy);
        e_bullets_.append(make({s.f[0], s.f[1], s.f[2]}));
      } else {
        at(enemy).f[4] -= 1;
      }
    });
  }

  void update_enemy_bullets() {
    e_bullets_.for_each_reversed([&](int bullet) {
      if (at_sub(bullet)) over_ = true;
      at(bullet).x() += at(bullet).right() ? 1 : -1;
      if (at(bullet).x() < 0 || at(bullet).x() > 9) {
        e_bullets_.remove(bullet);
      } else if (at_sub(bullet)) {
        over_ = true;
      }
    });
  }

  int surface() {
    surface_ = true;
    int reward = 0;
    if (diver_count_ == 6) {
      diver_count_ = 0;
      reward = floor_div(oxygen_ * 10, kMaxOxygen);
    }
    oxygen_ = kMaxOxygen;
    diver_count_ -= 1;  // also after six divers: the reference leaves the count at -1
    if (ramping_ && (e_spawn_speed_ > 1 || move_speed_ > 2)) {
      if (move_speed_ > 2 && ramp_index_ % 2) move_speed_ -= 1;
      if (e_spawn_speed_ > 1) e_spawn_speed_ -= 1;
      ramp_index_ += 1;
    }
    return reward;
  }

  // No spawn in a row where an enemy moves the other way.
  void spawn_enemy(NumpyRandom& rng) {
    const bool right = rng.rand() < 1.0 / 2;
    const bool is_sub = rng.rand() < 1.0 / 3;
    const int x = right ? 0 : 9;
    const int y = rng.randint(1, 9);
    for (ObjectList* list : {&e_subs_, &e_fish_}) {
      for (int h : list->items()) {
        if (at(h).y() == y && at(h).right() != right) return;
      }
    }
    if (is_sub) {
      e_subs_.append(make({x, y, right, move_speed_, kEnemyShotInterval}));
    } else {
      e_fish_.append(make({x, y, right, move_speed_}));
    }
  }

  void spawn_diver(NumpyRandom& rng) {
    const bool right = rng.rand() < 1.0 / 2;
    const int y = rng.randint(1, 9);
    divers_.append(make({right ? 0 : 9, y, right, kDiverMoveInterval}));
  }

  // Drops the pool's objects that no list holds any more (the lists keep their order).
  void compact() {
    std::vector<Object> live;
    for (ObjectList* list : lists()) {
      for (int& h : list->items()) {
        live.push_back(at(h));
        h = static_cast<int>(live.size() - 1);
      }
    }
    pool_.swap(live);
  }

  bool ramping_;
  std::vector<Object> pool_;
  ObjectList f_bullets_, e_bullets_, e_fish_, e_subs_, divers_;
  int oxygen_ = 0, diver_count_ = 0, sub_x_ = 5, sub_y_ = 0;
  bool sub_right_ = false;
  int e_spawn_speed_ = 0, e_spawn_timer_ = 0, d_spawn_timer_ = 0, move_speed_ = 0;
  int ramp_index_ = 0, shot_timer_ = 0;
  bool surface_ = true, over_ = false;
};

}  // namespace

std::unique_ptr<Game> make_seaquest(bool ramping) { return std::make_unique<Seaquest>(ramping); }

}  // namespace replicator::rl::minatar
