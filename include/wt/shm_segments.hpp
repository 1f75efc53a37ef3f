// wt 0.1.0's path for <wt/sdk/shm_segments.hpp>, kept so that backends written against 0.1 build
// unchanged. New code includes <wt/sdk/shm_segments.hpp>.
#pragma once

#include <wt/sdk/shm_segments.hpp>
