#include <gtest/gtest.h>
#include "gradgrad.h"
