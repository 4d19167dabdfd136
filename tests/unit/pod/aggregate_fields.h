// Field-by-field access to the Pod model's plain structs (aggregates without bases), for tests
// that must notice a field added in one place and forgotten in another: FieldCount<T>() counts
// an aggregate's members (the largest brace list of "anything" that initialises it), and
// ForEachField(t, f) calls f(index, member) for each member through a structured binding.
// Test-only: the production code never needs it.
#pragma once

#include <cstddef>
#include <string_view>
#include <type_traits>
#include <utility>

namespace nodelet::pod::testing {

// Converts to anything: one brace element of any member type.
struct AnyField {
  template <class T>
  operator T() const;  // never defined: used in unevaluated contexts only
};

template <class T, class... A>
constexpr size_t FieldCount() {
  if constexpr (requires { T{A{}..., AnyField{}}; }) {
    return FieldCount<T, A..., AnyField>();
  } else {
    return sizeof...(A);
  }
}

// The model's aggregates (the Pod structs), as opposed to leaves (strings, numbers, containers,
// Quantity).
template <class T>
concept ModelStruct = std::is_aggregate_v<T> && std::is_class_v<T> && !requires(T t) {
  t.begin();
};

template <class T, class F>
void ForEachField(T& t, F&& f) {
  constexpr size_t n = FieldCount<std::remove_const_t<T>>();
  static_assert(n <= 24, "extend ForEachField for structs of more than 24 fields");
#define NODELET_FIELDS_CASE(N, ...)          \
  if constexpr (n == N) {                    \
    auto& [__VA_ARGS__] = t;                 \
    size_t i = 0;                            \
    auto call = [&](auto& m) { f(i++, m); }; \
    (void)i;                                 \
    NODELET_FIELDS_APPLY(__VA_ARGS__)        \
  }
#define NODELET_FIELDS_APPLY(...) [&](auto&... ms) { (call(ms), ...); }(__VA_ARGS__);
  NODELET_FIELDS_CASE(1, a1)
  NODELET_FIELDS_CASE(2, a1, a2)
  NODELET_FIELDS_CASE(3, a1, a2, a3)
  NODELET_FIELDS_CASE(4, a1, a2, a3, a4)
  NODELET_FIELDS_CASE(5, a1, a2, a3, a4, a5)
  NODELET_FIELDS_CASE(6, a1, a2, a3, a4, a5, a6)
  NODELET_FIELDS_CASE(7, a1, a2, a3, a4, a5, a6, a7)
  NODELET_FIELDS_CASE(8, a1, a2, a3, a4, a5, a6, a7, a8)
  NODELET_FIELDS_CASE(9, a1, a2, a3, a4, a5, a6, a7, a8, a9)
  NODELET_FIELDS_CASE(10, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10)
  NODELET_FIELDS_CASE(11, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11)
  NODELET_FIELDS_CASE(12, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11, a12)
  NODELET_FIELDS_CASE(13, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11, a12, a13)
  NODELET_FIELDS_CASE(14, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11, a12, a13, a14)
  NODELET_FIELDS_CASE(15, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11, a12, a13, a14, a15)
  NODELET_FIELDS_CASE(16, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11, a12, a13, a14, a15, a16)
  NODELET_FIELDS_CASE(17, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11, a12, a13, a14, a15, a16,
                      a17)
  NODELET_FIELDS_CASE(18, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11, a12, a13, a14, a15, a16,
                      a17, a18)
  NODELET_FIELDS_CASE(19, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11, a12, a13, a14, a15, a16,
                      a17, a18, a19)
  NODELET_FIELDS_CASE(20, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11, a12, a13, a14, a15, a16,
                      a17, a18, a19, a20)
  NODELET_FIELDS_CASE(21, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11, a12, a13, a14, a15, a16,
                      a17, a18, a19, a20, a21)
  NODELET_FIELDS_CASE(22, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11, a12, a13, a14, a15, a16,
                      a17, a18, a19, a20, a21, a22)
  NODELET_FIELDS_CASE(23, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11, a12, a13, a14, a15, a16,
                      a17, a18, a19, a20, a21, a22, a23)
  NODELET_FIELDS_CASE(24, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11, a12, a13, a14, a15, a16,
                      a17, a18, a19, a20, a21, a22, a23, a24)
#undef NODELET_FIELDS_APPLY
#undef NODELET_FIELDS_CASE
}

// The type's name as the compiler spells it ("nodelet::pod::Container"), for messages.
template <class T>
constexpr std::string_view TypeName() {
  std::string_view p = __PRETTY_FUNCTION__;
  auto start = p.find("T = ") + 4;
  auto end = p.find_first_of(";]", start);
  return p.substr(start, end - start);
}

}  // namespace nodelet::pod::testing
