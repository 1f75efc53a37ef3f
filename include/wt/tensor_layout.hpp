// wt 0.1.0's path for <wt/sdk/tensor_layout.hpp>, kept so that backends written against 0.1 build
// unchanged. New code includes <wt/sdk/tensor_layout.hpp>.
#pragma once

#include <wt/sdk/tensor_layout.hpp>
