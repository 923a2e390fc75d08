// The polling wait of the CUDA backend's host waits (label cuda-host): it
// returns as soon as the condition holds, answers (between()) at once and
// then at the stated interval while it waits, and passes on what between()
// throws (a timeout), so a GPU wait never blocks the watchdog's answers.
#include <gtest/gtest.h>

#include <chrono>
#include <stdexcept>

#include "core/poll_wait.hpp"

namespace {
using st::poll_wait;
using st::PollPolicy;
using Clock = std::chrono::steady_clock;

TEST(PollWait, ReturnsWhenDoneWithoutAnsweringAFinishedWait) {
  int answers = 0;
  EXPECT_EQ(poll_wait([] { return true; }, [&] { ++answers; }), 1);
  EXPECT_EQ(answers, 0);
  int polls = 0;
  EXPECT_EQ(poll_wait([&] { return ++polls == 5; }, [&] { ++answers; }), 5);
  EXPECT_EQ(answers, 1);  // once at once, then not before 50 ms
}

TEST(PollWait, AnswersAtTheIntervalWhileWaiting) {
  const auto t0 = Clock::now();
  int answers = 0;
  PollPolicy p;
  p.spins = 10;
  p.sleep_s = 1e-3;
  p.answer_every_s = 0.02;
  poll_wait([&] { return Clock::now() - t0 > std::chrono::milliseconds(200); }, [&] { ++answers; },
            p);
  // 200 ms at one answer per >= 20 ms: about 10 (scheduling can only lower it).
  EXPECT_GE(answers, 3);
  EXPECT_LE(answers, 11);
}

TEST(PollWait, WhatBetweenThrowsEndsTheWait) {
  int answers = 0;
  PollPolicy p;
  p.answer_every_s = 0;
  EXPECT_THROW(poll_wait([] { return false; },
                         [&] {
                           if (++answers == 3) throw std::runtime_error("timeout");
                         },
                         p),
               std::runtime_error);
  EXPECT_EQ(answers, 3);
}
}  // namespace
