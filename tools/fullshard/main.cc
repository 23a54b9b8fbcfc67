#include <cstdio>
int main() { std::puts("fullshard: under construction"); return 0; }
