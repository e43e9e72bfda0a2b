#include <config.h>
#include "unit.h"
int main (void) { return unit_exit ("unit-random"); }
